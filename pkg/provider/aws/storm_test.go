package aws_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	"github.com/proxyfleet/proxy-operator/pkg/provider/aws"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/ec2test"
)

// TestFaultStormLeaksAndDuplicatesNothing: a fleet of aws Proxies is
// created, edited and deleted while EC2 throttles, fails, runs out of
// capacity, loses the answers of launches it made and hides new instances
// from its describes, with the orphan collector running as on the leader.
// Once the faults stop the fleet converges: every Proxy provisioned on
// exactly one live instance, its own, from its current spec; no instance of
// a deleted Proxy left; no Proxy that was never edited launched twice (the
// client token turns a retried launch into the same instance); and from
// then on no sample ever shows a second instance of a Proxy. Deleting the
// rest leaves nothing running.
//
// The fake keeps EC2's order where it matters: a random capacity error
// comes only after the client token is found new, so the retry of a launch
// whose answer was lost gets that instance back (EC2's idempotency), while
// throttling and internal errors may come first (ec2test/faults.go).
func TestFaultStormLeaksAndDuplicatesNothing(t *testing.T) {
	t.Parallel()
	const n = 20
	h := startController(t, "127.0.0.36", ec2test.WithInvisibleCalls(2), ec2test.WithSteps(2))
	collector := h.newCollector(t, gc.Config{Interval: 500 * time.Millisecond, DuplicateGrace: 3 * time.Second})
	go func() { _ = collector.Run(h.Ctx) }()
	h.fake.SetRandomFaults(0.2, 20261204)
	h.fake.LoseNextAnswers(ec2test.RunInstances, 3)

	uids := map[string]string{}
	for i := range n {
		p := h.Create(h.awsProxy(fmt.Sprintf("s%02d", i)))
		uids[p.Name] = string(p.UID)
	}
	time.Sleep(2 * time.Second)
	edited, deleted := []string{"s00", "s01", "s02", "s03"}, []string{"s04", "s05", "s06", "s07"}
	for _, name := range edited {
		h.Update(name, func(p *crawlv1alpha1.Proxy) { p.Spec.AWS.InstanceTypes = []string{"t3a.micro"} })
	}
	for _, name := range deleted {
		if err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(h.Ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Second)
	h.fake.SetRandomFaults(0, 0)
	t.Logf("storm over: %d launches, %d describes, %d terminates", h.fake.Calls(ec2test.RunInstances),
		h.fake.Calls(ec2test.DescribeInstances), h.fake.Calls(ec2test.TerminateInstances))

	h.Eventually(2*time.Minute, "the fleet converged", func() (bool, string) {
		live := liveByUID(h.fake)
		for name, uid := range uids {
			p, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Get(h.Ctx, name, metav1.GetOptions{})
			if slices.Contains(deleted, name) {
				if !apierrors.IsNotFound(err) || len(live[uid]) != 0 {
					return false, fmt.Sprintf("deleted %s: %v, live instances %v", name, err, live[uid])
				}
				continue
			}
			if err != nil {
				return false, err.Error()
			}
			if !meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned) ||
				len(live[uid]) != 1 || !matchesStatus(p, live[uid][0]) {
				return false, fmt.Sprintf("%s: providerID %q, conditions %+v, live instances %+v", name, p.Status.ProviderID, p.Status.Conditions, live[uid])
			}
		}
		return true, ""
	})

	// Converged: from now on every sample, one every quarter second over
	// five seconds (ten collector rounds), holds one instance per Proxy.
	samples := time.NewTicker(250 * time.Millisecond)
	defer samples.Stop()
	for i := range 20 {
		live := liveByUID(h.fake)
		for name, uid := range uids {
			if len(live[uid]) > 1 {
				t.Fatalf("sample %d after convergence: %s has %d live instances: %+v", i, name, len(live[uid]), live[uid])
			}
		}
		<-samples.C
	}

	launched := map[string]int{}
	for _, in := range h.fake.Instances() {
		launched[in.Tags[crawlv1alpha1.TagProxyUID]]++
	}
	for name, uid := range uids {
		switch {
		case slices.Contains(deleted, name) && launched[uid] > 1:
			// Deleted early, it may never have launched at all.
			t.Errorf("%s was deleted and launched %d instances, want at most 1", name, launched[uid])
		case !slices.Contains(edited, name) && !slices.Contains(deleted, name) && launched[uid] != 1:
			t.Errorf("%s was never edited and launched %d instances, want 1", name, launched[uid])
		}
	}

	for name := range uids {
		_ = h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(h.Ctx, name, metav1.DeleteOptions{})
	}
	h.Eventually(time.Minute, "nothing left running", func() (bool, string) {
		live := h.fake.Live()
		running := slices.DeleteFunc(live, func(in ec2test.Instance) bool { return in.State == "shutting-down" })
		return len(running) == 0, fmt.Sprintf("live %+v", running)
	})
}

// liveByUID are the fake's live instances by the Proxy UID they carry.
func liveByUID(fake *ec2test.Server) map[string][]ec2test.Instance {
	out := map[string][]ec2test.Instance{}
	for _, in := range fake.Live() {
		if in.State == "shutting-down" {
			continue // on its way out: the controller has let go of it
		}
		uid := in.Tags[crawlv1alpha1.TagProxyUID]
		out[uid] = append(out[uid], in)
	}
	return out
}

// matchesStatus: the Proxy's status names in, which carries its spec hash.
func matchesStatus(p *crawlv1alpha1.Proxy, in ec2test.Instance) bool {
	id := p.Status.ProviderID
	return len(id) >= len(in.ID) && id[len(id)-len(in.ID):] == in.ID &&
		in.Tags[aws.TagSpecHash] == p.Annotations[crawlv1alpha1.SpecHashAnnotation]
}
