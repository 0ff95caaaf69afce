package leaseintegration_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/lease/failover"
	"github.com/proxyfleet/proxy-operator/pkg/lease/feed"
	"github.com/proxyfleet/proxy-operator/pkg/lease/server"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

var apiServer = testenv.NewShared(testenv.Options{})

func TestMain(m *testing.M) { os.Exit(apiServer.Run(m)) }

const (
	nsAllowed   = "lease-a"
	nsForbidden = "lease-b"
	nsOperator  = "lease-system"
	crawlerSA   = "crawler"
)

var leaseKey = []byte("integration-test-key-of-32-bytes")

// harness is a leading lease API, authorizing with the real API server's
// TokenReview and SubjectAccessReview (as the admin), fed by a real Proxy
// informer, served over HTTP on loopback.
type harness struct {
	kube  kubernetes.Interface
	crawl versioned.Interface
	url   string
}

func startLeaseAPI(t *testing.T) *harness {
	env := apiServer.Get(t)
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	h := &harness{kube: kubernetes.NewForConfigOrDie(env.Config), crawl: versioned.NewForConfigOrDie(env.Config)}
	for _, ns := range []string{nsAllowed, nsForbidden, nsOperator} {
		_, err := h.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}

	st, err := store.New(store.Config{Key: leaseKey})
	if err != nil {
		t.Fatal(err)
	}
	factory := crawlinformers.NewSharedInformerFactory(h.crawl, 0)
	proxiesSynced, err := feed.Proxies(st, factory.Crawl().V1alpha1().Proxies())
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	auth := auth.NewKubernetes(h.kube, auth.KubernetesOptions{})
	srv, err := server.New(server.Config{
		Store: st, Authenticator: auth, Authorizer: auth,
		Horizon: failover.NewConfigMapHorizon(h.kube, nsOperator, "lease-horizon-"+strings.ToLower(t.Name()), "test"),
	})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, func(context.Context) (bool, error) { return proxiesSynced(), nil })
	if err := srv.StartLeading(ctx); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler()) // 127.0.0.1
	t.Cleanup(ts.Close)
	h.url = ts.URL
	return h
}

// readyProxy creates an External Proxy and marks it Ready, as the controller would.
func (h *harness) readyProxy(t *testing.T, ns, name string) {
	t.Helper()
	ctx := t.Context()
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"test": name}},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:     crawlv1alpha1.ModeExternal,
			Endpoint: &crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: 3128},
		},
	}
	created, err := h.crawl.CrawlV1alpha1().Proxies(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.setPhase(t, created, crawlv1alpha1.PhaseReady)
}

func (h *harness) setPhase(t *testing.T, p *crawlv1alpha1.Proxy, phase crawlv1alpha1.ProxyPhase) {
	t.Helper()
	p = p.DeepCopy()
	healthy := metav1.ConditionTrue
	if phase != crawlv1alpha1.PhaseReady {
		healthy = metav1.ConditionFalse
	}
	now := metav1.Now()
	p.Status = crawlv1alpha1.ProxyStatus{
		Phase: phase, IP: "127.0.0.1", Port: 3128, LatencyMillis: 5,
		Conditions: []metav1.Condition{
			{Type: crawlv1alpha1.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: "ExternalEndpoint", Message: "test", LastTransitionTime: now},
			{Type: crawlv1alpha1.ConditionHealthy, Status: healthy, Reason: "Probe", Message: "test", LastTransitionTime: now},
		},
	}
	if _, err := h.crawl.CrawlV1alpha1().Proxies(p.Namespace).UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// grantLeasing gives the crawler ServiceAccount every lease verb in ns
// (testenv.GrantLeasing).
func (h *harness) grantLeasing(t *testing.T, ns string) {
	t.Helper()
	testenv.GrantLeasing(t, h.kube, ns, types.NamespacedName{Namespace: nsAllowed, Name: crawlerSA})
}

func poll(t *testing.T, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	eventually.Check(t, 30*time.Second, 50*time.Millisecond, "condition", func(ctx context.Context) error {
		ok, err := cond(ctx)
		if err == nil && !ok {
			err = errors.New("not met")
		}
		return err
	})
}

func clientWithToken(t *testing.T, url, token string) *client.Client {
	t.Helper()
	c, err := client.New(url, client.WithToken(func(context.Context) (string, error) { return token, nil }))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestServiceAccountLeasesWhereRBACAllows(t *testing.T) {
	env := apiServer.Get(t)
	h := startLeaseAPI(t)
	h.readyProxy(t, nsAllowed, "pa")
	h.readyProxy(t, nsForbidden, "pb")
	token, err := env.ServiceAccountToken(t.Context(), nsAllowed, crawlerSA, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h.grantLeasing(t, nsAllowed)
	crawler := clientWithToken(t, h.url, token)
	ctx := t.Context()

	// The feed may not have delivered the Ready status yet.
	var l *client.Lease
	poll(t, func(ctx context.Context) (bool, error) {
		l, err = crawler.Acquire(ctx, client.AcquireRequest{Holder: "crawler-1", Namespace: nsAllowed, Selector: "test=pa"})
		return err == nil, nil
	})
	if l.Proxy.Name != "pa" || l.Proxy.URL != "http://127.0.0.1:3128" {
		t.Errorf("leased %+v", l.Proxy)
	}
	if _, err := crawler.Renew(ctx, l.ID, 0); err != nil {
		t.Errorf("Renew: %v", err)
	}
	if _, err := crawler.Leases(ctx, client.LeasesFilter{Namespace: nsAllowed}); err != nil {
		t.Errorf("Leases in %s: %v", nsAllowed, err)
	}

	for name, tc := range map[string]struct {
		call       func(c *client.Client) error
		c          *client.Client
		wantStatus int
	}{
		"acquire in the other namespace": {
			c: crawler,
			call: func(c *client.Client) error {
				_, err := c.Acquire(ctx, client.AcquireRequest{Holder: "crawler-1", Namespace: nsForbidden})
				return err
			},
			wantStatus: 403,
		},
		"acquire in any namespace (cluster-wide)": {
			c: crawler,
			call: func(c *client.Client) error {
				_, err := c.Acquire(ctx, client.AcquireRequest{Holder: "crawler-1"})
				return err
			},
			wantStatus: 403,
		},
		"discovery in the other namespace": {
			c:          crawler,
			call:       func(c *client.Client) error { _, err := c.Proxies(ctx, nsForbidden, ""); return err },
			wantStatus: 403,
		},
		"no token": {
			c: clientWithToken(t, h.url, ""),
			call: func(c *client.Client) error {
				_, err := c.Acquire(ctx, client.AcquireRequest{Holder: "x", Namespace: nsAllowed})
				return err
			},
			wantStatus: 401,
		},
		"a garbage token": {
			c: clientWithToken(t, h.url, "garbage"),
			call: func(c *client.Client) error {
				_, err := c.Acquire(ctx, client.AcquireRequest{Holder: "x", Namespace: nsAllowed})
				return err
			},
			wantStatus: 401,
		},
		"a tampered token": {
			c: clientWithToken(t, h.url, token+"x"),
			call: func(c *client.Client) error {
				_, err := c.Proxies(ctx, nsAllowed, "")
				return err
			},
			wantStatus: 401,
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.call(tc.c)
			var apiErr *client.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.wantStatus {
				t.Errorf("err = %v, want %d", err, tc.wantStatus)
			}
		})
	}
	// Release is a delete in the proxy's namespace: allowed.
	if err := crawler.Release(ctx, l.ID, client.OutcomeOK, ""); err != nil {
		t.Errorf("Release: %v", err)
	}
}

func TestUnhealthyProxyRevokesItsLease(t *testing.T) {
	env := apiServer.Get(t)
	h := startLeaseAPI(t)
	h.readyProxy(t, nsAllowed, "flaky")
	token, err := env.ServiceAccountToken(t.Context(), nsAllowed, crawlerSA, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h.grantLeasing(t, nsAllowed)
	crawler := clientWithToken(t, h.url, token)
	var l *client.Lease
	poll(t, func(ctx context.Context) (bool, error) {
		l, err = crawler.Acquire(ctx, client.AcquireRequest{Holder: "crawler-2", Namespace: nsAllowed, Selector: "test=flaky"})
		return err == nil, nil
	})

	p, err := h.crawl.CrawlV1alpha1().Proxies(nsAllowed).Get(t.Context(), "flaky", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.setPhase(t, p, crawlv1alpha1.PhaseUnhealthy)
	var renewErr error
	poll(t, func(ctx context.Context) (bool, error) {
		_, renewErr = crawler.Renew(ctx, l.ID, 0)
		return renewErr != nil, nil
	})
	var apiErr *client.Error
	if !errors.As(renewErr, &apiErr) || apiErr.StatusCode != 410 || apiErr.Code != "Revoked" {
		t.Errorf("Renew after the proxy turned Unhealthy: err = %v, want 410 Revoked", renewErr)
	}
}

func TestConfigMapHorizonOnTheAPIServer(t *testing.T) {
	env := apiServer.Get(t)
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsOperator}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	a := failover.NewConfigMapHorizon(kube, nsOperator, "horizon-fence", "a")
	b := failover.NewConfigMapHorizon(kube, nsOperator, "horizon-fence", "b")
	if got, err := a.Claim(ctx); err != nil || !got.IsZero() {
		t.Fatalf("a's first Claim: %v, %v", got, err)
	}
	horizon := time.Now().Add(time.Minute).Round(0)
	if err := a.Save(ctx, horizon); err != nil {
		t.Fatal(err)
	}
	got, err := b.Claim(ctx)
	if err != nil || !got.Equal(horizon) {
		t.Fatalf("b's Claim = %v, %v; want %v", got, err, horizon)
	}
	if err := a.Save(ctx, horizon.Add(time.Hour)); !errors.Is(err, failover.ErrHorizonLost) {
		t.Errorf("a's Save after b's claim: err = %v, want ErrHorizonLost", err)
	}
	if err := b.Save(ctx, horizon.Add(time.Second)); err != nil {
		t.Errorf("b's Save: %v", err)
	}
}
