package feed

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	crawlfake "github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned/fake"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

const testNamespace = "crawl"

// t0 is when the tests' fake clocks start.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// newLeadingStore is an empty store that leads, on a fake clock at t0.
func newLeadingStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.New(store.Config{Clock: clocktesting.NewFakeClock(t0), Key: bytes.Repeat([]byte("k"), store.MinKeyLen)})
	if err != nil {
		t.Fatal(err)
	}
	st.Lead(time.Time{}, time.Time{})
	return st
}

type crawlProxyOption func(*crawlv1alpha1.Proxy)

// newCrawlProxy is a Ready Managed Proxy at 127.0.0.5:3128.
func newCrawlProxy(name string, opts ...crawlProxyOption) *crawlv1alpha1.Proxy {
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"tier": "a"}},
		Spec:       crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderLocal, MaxLeases: 2},
		Status:     crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.PhaseReady, IP: "127.0.0.5", Port: 3128, LatencyMillis: 42},
	}
	for _, opt := range opts {
		opt(p)
	}
	return p
}

func TestProxyInfoFrom(t *testing.T) {
	now := metav1.NewTime(t0)
	conditions := func(provisioned, healthy time.Time) crawlProxyOption {
		return func(p *crawlv1alpha1.Proxy) {
			p.Status.Conditions = []metav1.Condition{
				{Type: crawlv1alpha1.ConditionProvisioned, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(provisioned)},
				{Type: crawlv1alpha1.ConditionHealthy, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(healthy)},
			}
		}
	}
	for name, tc := range map[string]struct {
		proxy          *crawlv1alpha1.Proxy
		wantReady      bool
		wantURL        string
		wantReadySince time.Time
		// The Secret a grant reads credentials from; a Managed Proxy
		// without spec.auth has the controller's.
		wantSecret string
	}{
		"Ready managed": {proxy: newCrawlProxy("p"), wantReady: true, wantURL: "http://127.0.0.5:3128", wantSecret: "proxy-auth-uid-p"},
		"Ready since the later transition": {
			proxy:     newCrawlProxy("p", conditions(t0, t0.Add(time.Minute))),
			wantReady: true, wantURL: "http://127.0.0.5:3128", wantReadySince: t0.Add(time.Minute), wantSecret: "proxy-auth-uid-p",
		},
		"not Ready: no Ready time": {
			proxy: newCrawlProxy("p", conditions(t0, t0.Add(time.Minute)), func(p *crawlv1alpha1.Proxy) {
				p.Status.Phase = crawlv1alpha1.PhaseUnhealthy
			}),
			wantURL: "http://127.0.0.5:3128", wantSecret: "proxy-auth-uid-p",
		},
		"spec.auth names the Secret": {
			proxy: newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) {
				p.Spec.Auth = &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: "auth"}}
			}),
			wantReady: true, wantURL: "http://127.0.0.5:3128", wantSecret: "auth",
		},
		"Ready external over https": {
			proxy: newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) {
				p.Spec = crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeExternal, Endpoint: &crawlv1alpha1.Endpoint{Host: "127.0.0.5", Port: 3128, Scheme: crawlv1alpha1.SchemeHTTPS}}
			}),
			wantReady: true, wantURL: "https://127.0.0.5:3128",
		},
		"IPv6": {
			proxy:     newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) { p.Status.IP = "::1" }),
			wantReady: true, wantURL: "http://[::1]:3128", wantSecret: "proxy-auth-uid-p",
		},
		"Unhealthy": {
			proxy:   newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) { p.Status.Phase = crawlv1alpha1.PhaseUnhealthy }),
			wantURL: "http://127.0.0.5:3128", wantSecret: "proxy-auth-uid-p",
		},
		"Provisioning": {
			proxy:   newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) { p.Status.Phase = crawlv1alpha1.PhaseProvisioning }),
			wantURL: "http://127.0.0.5:3128", wantSecret: "proxy-auth-uid-p",
		},
		"no address": {proxy: newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) { p.Status.IP = "" }), wantSecret: "proxy-auth-uid-p"},
		"no port":    {proxy: newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) { p.Status.Port = 0 }), wantSecret: "proxy-auth-uid-p"},
		"being deleted": {
			proxy:   newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) { p.DeletionTimestamp = &now }),
			wantURL: "http://127.0.0.5:3128", wantSecret: "proxy-auth-uid-p",
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := ProxyInfoFrom(tc.proxy)
			want := store.ProxyInfo{
				Key: store.ObjectName{Namespace: testNamespace, Name: "p"}, UID: tc.proxy.UID, Ready: tc.wantReady, URL: tc.wantURL,
				Labels: map[string]string{"tier": "a"}, LatencyMillis: 42, MaxLeases: tc.proxy.Spec.MaxLeases, ReadySince: tc.wantReadySince,
				CredentialsSecret: tc.wantSecret,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestFeedKeepsTheStoreInStep(t *testing.T) {
	client := crawlfake.NewClientset(newCrawlProxy("p1"))
	factory := crawlinformers.NewSharedInformerFactory(client, 0)
	st := newLeadingStore(t)
	synced, err := Proxies(st, factory.Crawl().V1alpha1().Proxies())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel() // before Shutdown, which waits for the informers to stop
	waitUntil(t, func() bool { return synced() })
	if got := st.Proxies("", nil); len(got) != 1 || got[0].Key.Name != "p1" {
		t.Fatalf("proxies after sync: %+v", got)
	}
	l, err := st.Acquire(ctx, store.AcquireRequest{Holder: "w"})
	if err != nil {
		t.Fatal(err)
	}

	// Unhealthy: the lease is revoked.
	p := newCrawlProxy("p1", func(p *crawlv1alpha1.Proxy) { p.Status.Phase = crawlv1alpha1.PhaseUnhealthy })
	if _, err := client.CrawlV1alpha1().Proxies(testNamespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		_, err := st.RenewAs("", l.ID, 0, store.Report{})
		return errors.Is(err, store.ErrRevoked)
	})

	// A new proxy is added; a deleted one goes.
	if _, err := client.CrawlV1alpha1().Proxies(testNamespace).Create(ctx, newCrawlProxy("p2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return len(st.Proxies("", nil)) == 1 && st.Proxies("", nil)[0].Key.Name == "p2" })
	if err := client.CrawlV1alpha1().Proxies(testNamespace).Delete(ctx, "p2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return len(st.Proxies("", nil)) == 0 })
}

// waitUntil waits up to 10s for cond to hold
// (pkg/testing/eventually).
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	eventually.Check(t, 10*time.Second, 5*time.Millisecond, "condition", eventually.Holds(func() (bool, string) { return cond(), "condition not met" }))
}

// ProxyInfoFrom marks a proxy a ProxyPool is taking out (its draining
// annotation), so that the store grants it no new lease.
func TestFeedMarksDrainingProxies(t *testing.T) {
	p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns"}}
	if ProxyInfoFrom(p).Draining {
		t.Error("a proxy without the annotation is draining")
	}
	p.Annotations = map[string]string{crawlv1alpha1.DrainingAnnotation: "2026-12-01T00:00:00Z"}
	if !ProxyInfoFrom(p).Draining {
		t.Error("a proxy with the draining annotation is not draining")
	}
}

// ProxyInfoFrom names the ProxyPool a member belongs to (its pool label),
// which leases on it report.
func TestProxyInfoFromNamesThePool(t *testing.T) {
	member := newCrawlProxy("m", func(p *crawlv1alpha1.Proxy) { p.Labels[crawlv1alpha1.PoolLabel] = "fleet" })
	if got := ProxyInfoFrom(member).Pool; got != "fleet" {
		t.Errorf("Pool of a member: %q, want fleet", got)
	}
	if got := ProxyInfoFrom(newCrawlProxy("p")).Pool; got != "" {
		t.Errorf("Pool of a proxy in no pool: %q, want none", got)
	}
}

// TestProxyInfoExitCountry: the measured country first, else the one a
// label declares; anything but an upper-case code is none.
func TestProxyInfoExitCountry(t *testing.T) {
	with := func(status, label string) *crawlv1alpha1.Proxy {
		return newCrawlProxy("px", func(p *crawlv1alpha1.Proxy) {
			p.Status.ExitCountry = status
			if label != "" {
				p.Labels[crawlv1alpha1.ExitCountryLabel] = label
			}
		})
	}
	got := map[string]string{
		"measured":            ProxyInfoFrom(with("DE", "")).ExitCountry,
		"measured over label": ProxyInfoFrom(with("DE", "US")).ExitCountry,
		"declared by label":   ProxyInfoFrom(with("", "US")).ExitCountry,
		"label not a code":    ProxyInfoFrom(with("", "usa")).ExitCountry,
		"unknown":             ProxyInfoFrom(with("", "")).ExitCountry,
	}
	want := map[string]string{"measured": "DE", "measured over label": "DE", "declared by label": "US", "label not a code": "", "unknown": ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ExitCountry (-want +got):\n%s", diff)
	}
}

// TestProxyInfoFromSharedInstance: a pool's shared instance is never
// granted (its sessions are), however Ready it is.
func TestProxyInfoFromSharedInstance(t *testing.T) {
	p := newCrawlProxy("p", func(p *crawlv1alpha1.Proxy) { p.Labels[crawlv1alpha1.PoolInstanceLabel] = "v6" })
	if got := ProxyInfoFrom(p); got.Ready {
		t.Errorf("a Ready shared instance is offered: %+v", got)
	}
	if got := ProxyInfoFrom(newCrawlProxy("p")); !got.Ready {
		t.Errorf("the same proxy without the label is not offered: %+v", got)
	}
}
