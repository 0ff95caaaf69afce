package chaos_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// TestOperatorKilledMidRollout: a pool of four rolls out a template change
// (maxSurge 1, maxUnavailable 1); the operator is killed with SIGKILL once
// the rollout is under way (new and old members side by side) and a new
// process takes over. The rollout goes on to four Ready members of the new
// revision; sampled every 100ms, never more than replicas+maxSurge members
// exist; and the instances are exactly the members' (nothing leaked).
func TestOperatorKilledMidRollout(t *testing.T) {
	const replicas, surge = 4, 1
	ns := newNamespace(t)
	stateDir := t.TempDir()
	t.Cleanup(func() { killForwardProxies(t, stateDir) })
	_, crawl := clients(t)
	flags := append([]string{"--providers=local", "--local-state-dir=" + stateDir}, shortLeaderElection...)
	op := startOperator(t, "operator-0", ns, flags...)
	target := proxytest.StartHTTPTarget(t)
	pools := crawl.CrawlV1alpha1().ProxyPools(ns)
	pool := &crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Name: "roll"},
		Spec: crawlv1alpha1.ProxyPoolSpec{
			Replicas: ptr.To[int32](replicas),
			Template: crawlv1alpha1.ProxyTemplate{Spec: crawlv1alpha1.ProxySpec{
				Provider:    crawlv1alpha1.ProviderLocal,
				CloudInit:   &crawlv1alpha1.CloudInit{Inline: ptr.To("#cloud-config\n# v1\n")},
				HealthCheck: fastHealthCheck(target.URL),
			}},
			Strategy: crawlv1alpha1.PoolStrategy{MaxSurge: ptr.To(intstr.FromInt32(surge)), MaxUnavailable: ptr.To(intstr.FromInt32(1))},
		},
	}
	if _, err := pools.Create(t.Context(), pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	members := func(ctx context.Context) ([]crawlv1alpha1.Proxy, error) {
		list, err := crawl.CrawlV1alpha1().Proxies(ns).List(ctx, metav1.ListOptions{LabelSelector: crawlv1alpha1.PoolLabel + "=roll"})
		if err != nil {
			return nil, err
		}
		return list.Items, nil
	}
	settled := func(ctx context.Context, notRevision string) error {
		p, err := pools.Get(ctx, "roll", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ms, err := members(ctx)
		if err != nil {
			return err
		}
		if p.Status.Revision == "" || p.Status.Revision == notRevision {
			return fmt.Errorf("revision %q", p.Status.Revision)
		}
		for _, m := range ms {
			if m.Labels[crawlv1alpha1.PoolRevisionLabel] != p.Status.Revision || m.Status.Phase != crawlv1alpha1.PhaseReady || m.DeletionTimestamp != nil {
				return fmt.Errorf("member %s: revision %s, phase %s", m.Name, m.Labels[crawlv1alpha1.PoolRevisionLabel], m.Status.Phase)
			}
		}
		if len(ms) != replicas {
			return fmt.Errorf("%d members", len(ms))
		}
		return nil
	}
	eventually.Check(t, 2*time.Minute, pollInterval, "4 Ready members", func(ctx context.Context) error { return settled(ctx, "") })
	first, _ := pools.Get(t.Context(), "roll", metav1.GetOptions{})

	// Sample the member count every 100ms for the whole rollout.
	var mu sync.Mutex
	maxMembers, samples := 0, 0
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if ms, err := members(context.Background()); err == nil {
				mu.Lock()
				maxMembers, samples = max(maxMembers, len(ms)), samples+1
				mu.Unlock()
			}
		}
	}()

	// The operator writes the pool's status meanwhile: retry on a conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := pools.Get(t.Context(), "roll", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Spec.Template.Spec.CloudInit.Inline = ptr.To("#cloud-config\n# v2\n")
		_, err = pools.Update(t.Context(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Mid-rollout: a member of the new revision is Ready and old ones remain.
	eventually.Check(t, 2*time.Minute, 20*time.Millisecond, "the rollout under way", func(ctx context.Context) error {
		ms, err := members(ctx)
		if err != nil {
			return err
		}
		fresh, old := 0, 0
		for _, m := range ms {
			if m.Labels[crawlv1alpha1.PoolRevisionLabel] == first.Status.Revision {
				old++
			} else if m.Status.Phase == crawlv1alpha1.PhaseReady {
				fresh++
			}
		}
		if fresh == 0 || old < 2 {
			return fmt.Errorf("%d new Ready, %d old", fresh, old)
		}
		return nil
	})
	op.Kill()
	t.Log("killed the operator mid-rollout")
	op = startOperator(t, "operator-1", ns, flags...)
	eventually.Check(t, 3*time.Minute, pollInterval, "4 Ready members of the new revision", func(ctx context.Context) error {
		return settled(ctx, first.Status.Revision)
	})
	close(stop)
	<-done
	t.Logf("%d samples: at most %d members", samples, maxMembers)
	if maxMembers > replicas+surge {
		t.Errorf("%d members existed at once; replicas+maxSurge is %d", maxMembers, replicas+surge)
	}
	eventually.Check(t, 30*time.Second, pollInterval, "no leaked instance", func(ctx context.Context) error {
		ms, err := members(ctx)
		if err != nil {
			return err
		}
		return operatortest.LocalLeaks(t, ms, stateDir, shared.Get(t).Binary)
	})
	if !op.Running() {
		t.Errorf("the restarted operator %s", op.Exit())
	}
}
