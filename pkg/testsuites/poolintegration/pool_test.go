package poolintegration_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// TestRotatingASecretRollsThePool: six members share a cloud-init Secret;
// the Secret is rotated; the pool replaces every member within maxSurge 1
// and maxUnavailable 1. Sampled every 100ms, Ready members never fall
// below 5 and members never exceed 7; it ends with 6 Ready members of the
// new revision and exactly their instances running.
func TestRotatingASecretRollsThePool(t *testing.T) {
	t.Parallel()
	pt := newPoolTest(t)
	target := proxytest.StartHTTPTarget(t)
	pt.createSecret("cloud-init", map[string]string{"user-data": "#cloud-config\n# v1\n"})
	pt.create(newPool("eu", 6, target.URL, func(p *crawlv1alpha1.ProxyPool) {
		p.Spec.Template.Spec.CloudInit = &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: "cloud-init", Key: "user-data"}}
	}))
	eventually.Check(t, 3*time.Minute, interval, "6 Ready members", func(ctx context.Context) error { return pt.settled(ctx, "eu", 6) })
	before, _ := pt.pool(t.Context(), "eu")
	oldMembers, _ := pt.members(t.Context(), "eu")

	s := pt.sample("eu")
	pt.updateSecret("cloud-init", map[string]string{"user-data": "#cloud-config\n# v2\n"})
	eventually.Check(t, 5*time.Minute, interval, "6 Ready members of the new revision", func(ctx context.Context) error {
		if p, err := pt.pool(ctx, "eu"); err != nil || p.Status.Revision == before.Status.Revision {
			return fmt.Errorf("revision still %s (%v)", before.Status.Revision, err)
		}
		return pt.settled(ctx, "eu", 6)
	})
	s.finish()
	t.Logf("%d samples during the rotation: min Ready %d, max members %d", s.samples, s.minReady, s.maxMembers)
	if s.minReady < 5 {
		t.Errorf("Ready members fell to %d during the rotation; maxUnavailable 1 allows 5", s.minReady)
	}
	if s.maxMembers > 7 {
		t.Errorf("%d members existed at once; maxSurge 1 allows 7", s.maxMembers)
	}
	if s.samples < 10 || len(s.errs) > 0 {
		t.Errorf("%d samples, errors %v: the sampler saw too little", s.samples, s.errs)
	}
	after, _ := pt.members(t.Context(), "eu")
	for _, m := range after {
		if slices.ContainsFunc(oldMembers, func(o crawlv1alpha1.Proxy) bool { return o.UID == m.UID }) {
			t.Errorf("member %s survived the rotation", m.Name)
		}
		if m.Labels["team"] != "crawl" || metav1.GetControllerOf(&m) == nil || metav1.GetControllerOf(&m).Kind != "ProxyPool" {
			t.Errorf("member %s: labels %v, owner %v", m.Name, m.Labels, m.OwnerReferences)
		}
	}
	eventually.Check(t, 30*time.Second, interval, "no leaked instance", func(ctx context.Context) error { return pt.noLeak(ctx, "eu") })

	// Deleting the pool deletes every member and its instance.
	if err := pt.crawl.CrawlV1alpha1().ProxyPools(pt.ns).Delete(t.Context(), "eu", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.Check(t, time.Minute, interval, "members and instances gone", func(ctx context.Context) error {
		ms, err := pt.members(ctx, "eu")
		if err != nil || len(ms) > 0 {
			return fmt.Errorf("%d members left (%v)", len(ms), err)
		}
		if n, pids := len(pt.instances()), pt.processes(); n > 0 || len(pids) > 0 {
			return fmt.Errorf("%d instances, processes %v", n, pids)
		}
		return nil
	})
}

// TestDrainingMemberKeepsItsLease: a leased member chosen for replacement
// keeps renewing, takes no new lease while it drains, and goes once the
// lease is released.
func TestDrainingMemberKeepsItsLease(t *testing.T) {
	t.Parallel()
	pt := newPoolTest(t)
	target := proxytest.StartHTTPTarget(t)
	pt.create(newPool("drain", 1, target.URL, func(p *crawlv1alpha1.ProxyPool) {
		p.Spec.Template.Spec.MaxLeases = 2
		p.Spec.Strategy = crawlv1alpha1.PoolStrategy{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}
		p.Spec.DrainTimeout = &metav1.Duration{Duration: 10 * time.Minute}
	}))
	eventually.Check(t, 2*time.Minute, interval, "1 Ready member", func(ctx context.Context) error { return pt.settled(ctx, "drain", 1) })
	lc, err := client.New("http://" + pt.op.LeaseAddr)
	if err != nil {
		t.Fatal(err)
	}
	sel := crawlv1alpha1.PoolLabel + "=drain"
	var held *client.Lease
	eventually.Check(t, time.Minute, interval, "a lease on the member", func(ctx context.Context) error {
		held, err = lc.Acquire(ctx, client.AcquireRequest{Holder: "crawler-1", Namespace: pt.ns, Selector: sel, TTL: 30 * time.Second})
		return err
	})
	oldName := held.Proxy.Name

	// A template change makes the member out of date.
	pt.updatePool("drain", func(p *crawlv1alpha1.ProxyPool) { p.Spec.Template.Metadata.Labels["rev"] = "2" })
	var newName string
	eventually.Check(t, 2*time.Minute, interval, "the old member draining beside a Ready successor", func(ctx context.Context) error {
		ms, err := pt.members(ctx, "drain")
		if err != nil {
			return err
		}
		draining := false
		newName = ""
		for _, m := range ms {
			if m.Name == oldName {
				_, draining = m.Annotations[crawlv1alpha1.DrainingAnnotation]
			} else if m.Status.Phase == crawlv1alpha1.PhaseReady {
				newName = m.Name
			}
		}
		if !draining || newName == "" {
			return fmt.Errorf("draining %v, Ready successor %q", draining, newName)
		}
		return nil
	})
	// The draining member has a free slot (maxLeases 2) but grants nothing:
	// the successor's two slots are all there is.
	for i := range 2 {
		l, err := lc.Acquire(t.Context(), client.AcquireRequest{Holder: fmt.Sprintf("crawler-new-%d", i), Namespace: pt.ns, Selector: sel, TTL: 30 * time.Second})
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		if l.Proxy.Name != newName {
			t.Errorf("acquire %d got %s, want the successor %s (the old member is draining)", i, l.Proxy.Name, newName)
		}
	}
	if l, err := lc.Acquire(t.Context(), client.AcquireRequest{Holder: "crawler-extra", Namespace: pt.ns, Selector: sel}); err == nil {
		t.Errorf("a third acquire got %s: the draining member granted a lease", l.Proxy.Name)
	}
	// The held lease keeps renewing while its member drains, across several drain polls.
	for i := range 4 {
		if held, err = lc.Renew(t.Context(), held.ID, 30*time.Second); err != nil {
			t.Fatalf("renewal %d of the draining member's lease: %v", i, err)
		}
		if _, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Get(t.Context(), oldName, metav1.GetOptions{}); err != nil {
			t.Fatalf("the draining member went while leased: %v", err)
		}
		pollUntil(t, 1500*time.Millisecond)
	}
	if err := lc.Release(t.Context(), held.ID, client.OutcomeOK, ""); err != nil {
		t.Fatal(err)
	}
	eventually.Check(t, time.Minute, interval, "the drained member gone", func(ctx context.Context) error {
		_, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Get(ctx, oldName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	eventually.Check(t, 30*time.Second, interval, "no leaked instance", func(ctx context.Context) error { return pt.noLeak(ctx, "drain") })
}

// pollUntil waits d by polling the clock, for a test that must let time
// pass while it holds state (a lease renewing across drain polls).
func pollUntil(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-t.Context().Done():
	case <-time.After(d):
	}
}

// TestRemediation: a member whose process is killed is healed in place by
// the Proxy controller (the local provider reports the instance stopped,
// and it gets a new one: the pool need not act); a member whose process
// hangs (SIGSTOP: running, but every probe times out) turns Unhealthy and
// the pool replaces it after unhealthyTimeout; with the probe target
// stopped (every member Unhealthy) nothing is replaced and the condition
// says why.
func TestRemediation(t *testing.T) {
	t.Parallel()
	pt := newPoolTest(t)
	target := proxytest.StartHTTPTarget(t)
	const unhealthyTimeout = 8 * time.Second
	pt.create(newPool("heal", 3, target.URL, func(p *crawlv1alpha1.ProxyPool) {
		p.Spec.Remediation.UnhealthyTimeout = &metav1.Duration{Duration: unhealthyTimeout}
	}))
	eventually.Check(t, 2*time.Minute, interval, "3 Ready members", func(ctx context.Context) error { return pt.settled(ctx, "heal", 3) })

	ms, _ := pt.members(t.Context(), "heal")
	// instancePID is the process of m's instance, false while it has none
	// (a status read just before the controller saw its instance stop).
	instancePID := func(m crawlv1alpha1.Proxy) (int, bool) {
		_, id, _ := provider.SplitProviderID(m.Status.ProviderID)
		for _, inst := range pt.instances() {
			if inst.ID == id {
				return inst.PID, true
			}
		}
		return 0, false
	}
	pidOf := func(m crawlv1alpha1.Proxy) int {
		pid, ok := instancePID(m)
		if !ok {
			t.Fatalf("no instance for %s (%s)", m.Name, m.Status.ProviderID)
		}
		return pid
	}

	// Killed: the Proxy controller makes the same member a new instance.
	killed, killedPID := ms[1], pidOf(ms[1])
	if err := syscall.Kill(killedPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually.Check(t, time.Minute, interval, killed.Name+" Ready on a new process", func(ctx context.Context) error {
		p, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Get(ctx, killed.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != crawlv1alpha1.PhaseReady {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		switch pid, ok := instancePID(*p); {
		case !ok:
			return fmt.Errorf("no instance for %s yet", p.Status.ProviderID)
		case pid == killedPID:
			return errors.New("still the killed process")
		}
		return nil
	})

	// Hung: Unhealthy, then replaced by the pool after unhealthyTimeout.
	victim, pid := ms[0], pidOf(ms[0])
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	// A hung process times every probe out; the local provider then reports
	// the instance not running (phase Provisioning) or the probes turn it
	// Unhealthy: either way it has left Ready, and the pool counts from then.
	var unhealthyAt time.Time
	eventually.Check(t, time.Minute, interval, victim.Name+" no longer Ready", func(ctx context.Context) error {
		p, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Get(ctx, victim.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase == crawlv1alpha1.PhaseReady {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		for _, c := range p.Status.Conditions {
			if c.Status != metav1.ConditionTrue && c.LastTransitionTime.After(unhealthyAt) {
				unhealthyAt = c.LastTransitionTime.Time
			}
		}
		t.Logf("%s is %s since %s", victim.Name, p.Status.Phase, unhealthyAt.Format(time.RFC3339))
		return nil
	})
	eventually.Check(t, 2*time.Minute, interval, victim.Name+" replaced", func(ctx context.Context) error {
		p, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Get(ctx, victim.Name, metav1.GetOptions{})
		if err == nil && p.DeletionTimestamp == nil {
			return errors.New("still a member")
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		// Condition times have second precision: allow for the truncation.
		if early := time.Since(unhealthyAt); early < unhealthyTimeout-time.Second {
			t.Errorf("replaced %v after it left Ready, before unhealthyTimeout %v", early, unhealthyTimeout)
		}
		return nil
	})
	eventually.Check(t, 2*time.Minute, interval, "3 Ready members again", func(ctx context.Context) error { return pt.settled(ctx, "heal", 3) })

	// The probe target stops: every member turns Unhealthy, which is more
	// than maxUnhealthy (40% of 3 is 1): nothing is replaced.
	ms, _ = pt.members(t.Context(), "heal")
	var names []string
	for _, m := range ms {
		names = append(names, string(m.UID))
	}
	target.Close()
	eventually.Check(t, time.Minute, interval, "remediation paused", func(ctx context.Context) error {
		p, err := pt.pool(ctx, "heal")
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.PoolConditionRemediationAllowed)
		if c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("RemediationAllowed %+v", c)
		}
		t.Logf("RemediationAllowed: %s: %s", c.Reason, c.Message)
		return nil
	})
	// Hold for three unhealthyTimeouts: the same three members, none deleted.
	deadline := time.Now().Add(3 * unhealthyTimeout)
	for time.Now().Before(deadline) {
		ms, err := pt.members(t.Context(), "heal")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range ms {
			if m.DeletionTimestamp != nil {
				t.Fatalf("member %s deleted while remediation is paused", m.Name)
			}
			got = append(got, string(m.UID))
		}
		slices.Sort(got)
		slices.Sort(names)
		if !slices.Equal(got, names) {
			t.Fatalf("members changed while remediation is paused: %v, were %v", got, names)
		}
		pollUntil(t, 500*time.Millisecond)
	}
	p, _ := pt.pool(t.Context(), "heal")
	c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.PoolConditionRemediationAllowed)
	if c == nil || c.Reason != "TooManyUnhealthy" || !containsAll(c.Message, "3 of 3", "maxUnhealthy", "probe target") {
		t.Errorf("RemediationAllowed does not say why: %+v", c)
	}
}

// TestMaxAgeRecycles: with maxAge 20s the pool keeps replacing members
// within its budget; no member lives longer than maxAge plus one rollout
// step, and Ready members never fall below replicas - maxUnavailable.
func TestMaxAgeRecycles(t *testing.T) {
	t.Parallel()
	pt := newPoolTest(t)
	target := proxytest.StartHTTPTarget(t)
	const maxAge = 20 * time.Second
	pt.create(newPool("age", 3, target.URL, func(p *crawlv1alpha1.ProxyPool) {
		p.Spec.MaxAge = &metav1.Duration{Duration: maxAge}
		p.Spec.DrainTimeout = &metav1.Duration{Duration: 0}
	}))
	eventually.Check(t, 2*time.Minute, interval, "3 Ready members", func(ctx context.Context) error { return pt.settled(ctx, "age", 3) })
	first, _ := pt.members(t.Context(), "age")
	s := pt.sample("age")
	// One rollout step: a successor is created and becomes Ready (a few
	// seconds here); allow a generous 30s under load.
	const step = 30 * time.Second
	seen := map[string]time.Time{}
	eventually.Check(t, 3*time.Minute, interval, "every first member recycled", func(ctx context.Context) error {
		ms, err := pt.members(ctx, "age")
		if err != nil {
			return err
		}
		for _, m := range ms {
			seen[m.Name] = m.CreationTimestamp.Time
			if age := time.Since(m.CreationTimestamp.Time); m.DeletionTimestamp == nil && age > maxAge+step {
				t.Errorf("member %s is %v old, past maxAge %v plus a step", m.Name, age.Round(time.Second), maxAge)
			}
		}
		for _, f := range first {
			if slices.ContainsFunc(ms, func(m crawlv1alpha1.Proxy) bool { return m.UID == f.UID }) {
				return fmt.Errorf("%s still a member", f.Name)
			}
		}
		return nil
	})
	s.finish()
	t.Logf("%d members seen; min Ready %d, max members %d", len(seen), s.minReady, s.maxMembers)
	if s.minReady < 2 || s.maxMembers > 4 {
		t.Errorf("recycling broke the budget: min Ready %d (want >= 2), max members %d (want <= 4)", s.minReady, s.maxMembers)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
