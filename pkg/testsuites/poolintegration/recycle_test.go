package poolintegration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// TestBurnedMemberIsRecycled: three members, one lease each at a time;
// two are held while the third is leased and released banned for three
// domains in turn. With maxBannedDomains 3 that member is burned: the pool
// makes a successor first (maxSurge 1, maxUnavailable 0), then deletes the
// burned member; the successor is a new instance (a new providerID) that
// leases for those three domains at once; the other two members keep
// their instances. Status, events, the printer columns and the removal
// metric say why.
func TestBurnedMemberIsRecycled(t *testing.T) {
	t.Parallel()
	pt := newPoolTest(t)
	target := proxytest.StartHTTPTarget(t)
	domains := []string{"shop.example", "news.example", "maps.example"}
	pt.create(newPool("burn", 3, target.URL, func(p *crawlv1alpha1.ProxyPool) {
		p.Spec.Template.Spec.MaxLeases = 1
		p.Spec.Strategy = crawlv1alpha1.PoolStrategy{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}
		p.Spec.Recycle = &crawlv1alpha1.PoolRecycle{MaxBannedDomains: ptr.To[int32](3), Window: &metav1.Duration{Duration: 10 * time.Minute}}
	}))
	eventually.Check(t, 3*time.Minute, interval, "3 Ready members", func(ctx context.Context) error { return pt.settled(ctx, "burn", 3) })
	before := pt.providerIDs(t, "burn")

	lc, err := client.New("http://" + pt.op.LeaseAddr)
	if err != nil {
		t.Fatal(err)
	}
	sel := crawlv1alpha1.PoolLabel + "=burn"
	acquire := func(holder, session string) *client.Lease {
		t.Helper()
		var l *client.Lease
		eventually.Check(t, time.Minute, interval, "a lease for "+holder, func(ctx context.Context) error {
			l, err = lc.Acquire(ctx, client.AcquireRequest{Holder: holder, Namespace: pt.ns, Selector: sel, Session: session, TTL: 3 * time.Minute})
			return err
		})
		return l
	}
	// Every member leased once: the first is the victim (a sticky session
	// brings its later leases back to it), the other two stay held.
	victimLease, held1, held2 := acquire("victim", "victim"), acquire("holder-1", ""), acquire("holder-2", "")
	victim := victimLease.Proxy.Name
	for i, d := range domains {
		l := victimLease
		if i > 0 {
			l = acquire(fmt.Sprintf("victim-%d", i), "victim") // the session's member, and the only free one
		}
		if l.Proxy.Name != victim {
			t.Fatalf("lease %d went to %s; the others are held, want %s", i, l.Proxy.Name, victim)
		}
		if err := lc.Release(t.Context(), l.ID, client.OutcomeBanned, d); err != nil {
			t.Fatal(err)
		}
	}

	s := pt.sample("burn")
	eventually.Check(t, 3*time.Minute, interval, victim+" recycled and 3 Ready members", func(ctx context.Context) error {
		if _, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Get(ctx, victim, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s still there (%v)", victim, err)
		}
		return pt.settled(ctx, "burn", 3)
	})
	s.finish()
	if s.minReady < 3 || s.maxMembers > 4 {
		t.Errorf("recycling broke the budget: min Ready %d (maxUnavailable 0 wants 3), max members %d (maxSurge 1 allows 4)", s.minReady, s.maxMembers)
	}
	after := pt.providerIDs(t, "burn")
	var successor string
	for name, id := range after {
		if old, ok := before[name]; ok {
			if id != old {
				t.Errorf("untouched member %s changed instance: %s, was %s", name, id, old)
			}
			continue
		}
		successor = name
		for oldName, oldID := range before {
			if id == oldID {
				t.Errorf("successor %s has %s's providerID %s", name, oldName, id)
			}
		}
	}
	if successor == "" || len(after) != 3 {
		t.Fatalf("members after the recycle %v, before %v: want two of the old and one successor", after, before)
	}

	// The two held leases go back; then each banned domain leases all three
	// members, the successor among them: it has no cool-down for them.
	for _, l := range []*client.Lease{held1, held2} {
		if err := lc.Release(t.Context(), l.ID, client.OutcomeOK, ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range domains {
		got := map[string]bool{}
		var ls []*client.Lease
		for i := range 3 {
			// Wait: the lease store learns of the successor's readiness through its own informer.
			l, err := lc.Acquire(t.Context(), client.AcquireRequest{Holder: fmt.Sprintf("%s-%d", d, i), Namespace: pt.ns, Selector: sel, Domain: d, Wait: 30 * time.Second})
			if err != nil {
				t.Fatalf("acquire %d for %s: %v", i, d, err)
			}
			got[l.Proxy.Name] = true
			ls = append(ls, l)
		}
		if !got[successor] || len(got) != 3 {
			t.Errorf("leases for %s went to %v, want all three members including the successor %s", d, got, successor)
		}
		for _, l := range ls {
			if err := lc.Release(t.Context(), l.ID, client.OutcomeOK, ""); err != nil {
				t.Fatal(err)
			}
		}
	}

	// What a reader sees: the status count, the condition, the events, the
	// wide columns and the metric.
	eventually.Check(t, time.Minute, interval, "status and condition", func(ctx context.Context) error {
		p, err := pt.pool(ctx, "burn")
		if err != nil {
			return err
		}
		if p.Status.Recycled != (crawlv1alpha1.PoolRecycleStatus{Burned: 1}) {
			return fmt.Errorf("status.recycled %+v, want burned 1", p.Status.Recycled)
		}
		c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.PoolConditionRecycling)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "1 burned and 0 used up") {
			return fmt.Errorf("Recycling condition %+v", c)
		}
		return nil
	})
	pt.wantEvent(t, "ProxyPool", "burn", "Recycled", victim, "burned: 3 distinct domains banned it within 10m0s (maxBannedDomains 3)")
	pt.wantEvent(t, "Proxy", victim, "Recycled", "burned: 3 distinct domains")
	col, err := pt.kubectlWide(t.Context(), "burn")
	if err != nil {
		t.Fatal(err)
	}
	if col["BURNED"] != "1" || col["USED-UP"] != "0" {
		t.Errorf("kubectl get pxp -o wide does not tell the story: %v", col)
	}
	scraped, err := pt.op.Scrape(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := scraped.Value("proxy_operator_pool_member_removals_total", map[string]string{"pool": "burn", "reason": "Burned"}); v != 1 {
		t.Errorf("proxy_operator_pool_member_removals_total{reason=Burned} = %v, want 1", v)
	}
	eventually.Check(t, 30*time.Second, interval, "no leaked instance", func(ctx context.Context) error { return pt.noLeak(ctx, "burn") })
}

// TestUsedUpMemberIsRecycled: with spec.recycle.maxLeases 3, leases are
// taken and released until one member has been granted its third; that
// member, still leased, is used up: it drains (its lease keeps renewing,
// it carries the Recycled condition), a successor takes its place, and it
// goes when the lease is released. The other member keeps its instance.
func TestUsedUpMemberIsRecycled(t *testing.T) {
	t.Parallel()
	pt := newPoolTest(t)
	target := proxytest.StartHTTPTarget(t)
	pt.create(newPool("use", 2, target.URL, func(p *crawlv1alpha1.ProxyPool) {
		p.Spec.Template.Spec.MaxLeases = 1
		p.Spec.Strategy = crawlv1alpha1.PoolStrategy{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}
		p.Spec.DrainTimeout = &metav1.Duration{Duration: 10 * time.Minute}
		p.Spec.Recycle = &crawlv1alpha1.PoolRecycle{MaxLeases: ptr.To[int64](3)}
	}))
	eventually.Check(t, 3*time.Minute, interval, "2 Ready members", func(ctx context.Context) error { return pt.settled(ctx, "use", 2) })
	before := pt.providerIDs(t, "use")
	lc, err := client.New("http://" + pt.op.LeaseAddr)
	if err != nil {
		t.Fatal(err)
	}
	sel := crawlv1alpha1.PoolLabel + "=use"
	served := map[string]int{}
	var held *client.Lease
	for i := 0; held == nil; i++ {
		if i > 10 {
			t.Fatalf("no member reached 3 leases after %d grants: %v", i, served)
		}
		l, err := lc.Acquire(t.Context(), client.AcquireRequest{Holder: fmt.Sprintf("w-%d", i), Namespace: pt.ns, Selector: sel, TTL: time.Minute, Wait: 30 * time.Second})
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		if served[l.Proxy.Name]++; served[l.Proxy.Name] == 3 {
			held = l
			break
		}
		if err := lc.Release(t.Context(), l.ID, client.OutcomeOK, ""); err != nil {
			t.Fatal(err)
		}
	}
	usedUp := held.Proxy.Name

	eventually.Check(t, 2*time.Minute, interval, usedUp+" draining as used up beside a Ready successor", func(ctx context.Context) error {
		p, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Get(ctx, usedUp, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Annotations[crawlv1alpha1.DrainReasonAnnotation] != "UsedUp" {
			return fmt.Errorf("drain reason %q", p.Annotations[crawlv1alpha1.DrainReasonAnnotation])
		}
		c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ProxyConditionRecycled)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != "UsedUp" || c.Message != "used up: served 3 leases (maxLeases 3)" {
			return fmt.Errorf("Recycled condition %+v", c)
		}
		ms, err := pt.members(ctx, "use")
		if err != nil {
			return err
		}
		if ready(ms) != 3 {
			return fmt.Errorf("%d Ready members, want the two and a successor", ready(ms))
		}
		pool, err := pt.pool(ctx, "use")
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(pool.Status.Conditions, crawlv1alpha1.PoolConditionRecycling); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "UsedUp" || !strings.Contains(c.Message, usedUp) {
			return fmt.Errorf("pool Recycling condition %+v", c)
		}
		return nil
	})
	// The used-up member's lease keeps renewing while it drains.
	if held, err = lc.Renew(t.Context(), held.ID, time.Minute); err != nil {
		t.Fatalf("renewing the used-up member's lease: %v", err)
	}
	if err := lc.Release(t.Context(), held.ID, client.OutcomeOK, ""); err != nil {
		t.Fatal(err)
	}
	eventually.Check(t, 2*time.Minute, interval, usedUp+" gone, 2 Ready members", func(ctx context.Context) error {
		if _, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Get(ctx, usedUp, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s still there (%v)", usedUp, err)
		}
		if err := pt.settled(ctx, "use", 2); err != nil {
			return err
		}
		p, err := pt.pool(ctx, "use")
		if err != nil {
			return err
		}
		if p.Status.Recycled != (crawlv1alpha1.PoolRecycleStatus{UsedUp: 1}) {
			return fmt.Errorf("status.recycled %+v, want usedUp 1", p.Status.Recycled)
		}
		return nil
	})
	after := pt.providerIDs(t, "use")
	for name, id := range before {
		if name == usedUp {
			continue
		}
		if after[name] != id {
			t.Errorf("untouched member %s: providerID %q, was %q", name, after[name], id)
		}
	}
	pt.wantEvent(t, "ProxyPool", "use", "Recycled", usedUp, "used up: served 3 leases (maxLeases 3)")
	eventually.Check(t, 30*time.Second, interval, "no leaked instance", func(ctx context.Context) error { return pt.noLeak(ctx, "use") })
}

// providerIDs maps the pool's members to their instances.
func (pt *poolTest) providerIDs(t *testing.T, pool string) map[string]string {
	t.Helper()
	ms, err := pt.members(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range ms {
		if m.Status.ProviderID == "" {
			t.Fatalf("member %s has no providerID", m.Name)
		}
		out[m.Name] = m.Status.ProviderID
	}
	return out
}

// wantEvent waits for an event on the named object with reason whose
// message holds every one of subs.
func (pt *poolTest) wantEvent(t *testing.T, kind, name, reason string, subs ...string) {
	t.Helper()
	eventually.Check(t, 30*time.Second, interval, fmt.Sprintf("a %s event on %s %s", reason, kind, name), func(ctx context.Context) error {
		evs, err := pt.kube.CoreV1().Events(pt.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind != kind || e.InvolvedObject.Name != name || e.Reason != reason {
				continue
			}
			if containsAll(e.Message, subs...) {
				return nil
			}
			seen = append(seen, e.Message)
		}
		return fmt.Errorf("none with %q; seen %q", subs, seen)
	})
}
