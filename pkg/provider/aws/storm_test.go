package aws_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	"github.com/proxyfleet/proxy-operator/pkg/provider/aws"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/cloudstorm"
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
// rest leaves nothing running. The storm and its checks are
// cloudstorm.Run's.
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

	calls := h.fake.Calls
	res := cloudstorm.Run(h.Harness, n, cloudstorm.Cloud[ec2test.Instance]{
		Noun:  "instance",
		Proxy: h.awsProxy,
		Edit:  func(p *crawlv1alpha1.Proxy) { p.Spec.AWS.InstanceTypes = []string{"t3a.micro"} },

		Creates:   func() int { return calls(ec2test.RunInstances) },
		Mutations: func() int { return calls(ec2test.RunInstances) + calls(ec2test.TerminateInstances) },
		Calls: func() int {
			return calls(ec2test.RunInstances) + calls(ec2test.DescribeInstances) + calls(ec2test.TerminateInstances)
		},
		MinCalls:   300,
		StopFaults: func() { h.fake.SetRandomFaults(0, 0) },
		Summary: func() string {
			return fmt.Sprintf("%d launches, %d describes, %d terminates", calls(ec2test.RunInstances),
				calls(ec2test.DescribeInstances), calls(ec2test.TerminateInstances))
		},

		Live:    liveInstances(h.fake),
		Created: h.fake.Instances,
		UID:     func(in ec2test.Instance) string { return in.Tags[crawlv1alpha1.TagProxyUID] },
		Matches: matchesStatus,
	})
	t.Logf("converged: %d instances launched for %d Proxies, 0 leaked, %d duplicates", res.Created, n, res.Duplicates)
}

// liveInstances lists the fake's instances neither terminated nor on
// their way out (shutting-down: the controller has let go of them).
func liveInstances(fake *ec2test.Server) func() []ec2test.Instance {
	return func() []ec2test.Instance {
		return slices.DeleteFunc(fake.Live(), func(in ec2test.Instance) bool { return in.State == "shutting-down" })
	}
}

// matchesStatus: the Proxy's status names in, which carries its spec hash.
func matchesStatus(p *crawlv1alpha1.Proxy, in ec2test.Instance) bool {
	id := p.Status.ProviderID
	return len(id) >= len(in.ID) && id[len(id)-len(in.ID):] == in.ID &&
		in.Tags[aws.TagSpecHash] == p.Annotations[crawlv1alpha1.SpecHashAnnotation]
}
