package health_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/upstream"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

var apiServer = testenv.NewShared(testenv.Options{})

// TestMain starts one API server for the package on first use and builds the
// forward-proxy binary on first use (proxytest.Main removes it).
func TestMain(m *testing.M) { os.Exit(apiServer.RunWith(m, proxytest.Main)) }

// The health checks of these tests: probes every second, a 500ms timeout.
const (
	interval = time.Second
	timeout  = 500 * time.Millisecond
	// slack covers what is not the engine's: the controller's sync and
	// status write, the informer's watch, a busy 2-core machine.
	slack = 5 * time.Second
)

// probeCounter is the engine's Metrics, counting probes per proxy.
type probeCounter struct {
	health.NoMetrics
	mu     sync.Mutex
	probes map[cache.ObjectName]int
}

func (c *probeCounter) ObserveProbe(key cache.ObjectName, _ string, _ time.Duration, _ time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probes[key]++
}

func (c *probeCounter) count(key cache.ObjectName) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.probes[key]
}

// harness runs the real controller and the health engine in-process against
// the real API server, in a namespace of its own.
type harness struct {
	t       *testing.T
	ns      string
	crawl   versioned.Interface
	kube    kubernetes.Interface
	metrics *probeCounter
}

func start(t *testing.T, rootCAs *x509.CertPool) *harness {
	env := apiServer.Get(t)
	t.Helper()
	_, logCtx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(logCtx)
	h := &harness{
		t:       t,
		crawl:   versioned.NewForConfigOrDie(env.Config),
		kube:    kubernetes.NewForConfigOrDie(env.Config),
		metrics: &probeCounter{probes: map[cache.ObjectName]int{}},
	}
	ns, err := h.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "health-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.ns = ns.Name

	crawlFactory := crawlinformers.NewSharedInformerFactoryWithOptions(h.crawl, 0, crawlinformers.WithNamespace(h.ns))
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(h.kube, 0, kubeinformers.WithNamespace(h.ns))
	proxies := crawlFactory.Crawl().V1alpha1().Proxies()
	secrets := kubeFactory.Core().V1().Secrets()

	// Sessions of a proxy network call nothing: the only provider a test of
	// probes needs, for Proxies whose address is a super proxy.
	providers := provider.Set{crawlv1alpha1.ProviderUpstream: upstream.New()}
	var ctrl *controller.Controller
	engine, err := health.New(health.Config{
		Proxies: proxies.Informer().GetIndexer(),
		Secrets: func(_ context.Context, namespace, name string) (*corev1.Secret, error) {
			return secrets.Lister().Secrets(namespace).Get(name)
		},
		Enqueue: func(key cache.ObjectName) { ctrl.Enqueue(key) },
		// A short tick, so that lateness does not blur the 1s intervals.
		Tick:      100 * time.Millisecond,
		Metrics:   h.metrics,
		RootCAs:   rootCAs,
		Providers: providers,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err = controller.NewController(controller.Config{
		CrawlClient:    h.crawl,
		KubeClient:     h.kube,
		ProxyInformer:  proxies,
		SecretInformer: secrets,
		Health:         engine,
		Providers:      providers,
	})
	if err != nil {
		t.Fatal(err)
	}
	crawlFactory.Start(ctx.Done())
	kubeFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), proxies.Informer().HasSynced, secrets.Informer().HasSynced) {
		t.Fatal("informer caches did not sync")
	}
	ctrlDone, engineDone := make(chan error, 1), make(chan error, 1)
	go func() { ctrlDone <- ctrl.Run(ctx, 2) }()
	go func() { engineDone <- engine.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-engineDone; err != nil {
			t.Errorf("engine.Run: %v", err)
		}
		if err := <-ctrlDone; err != nil {
			t.Errorf("controller.Run: %v", err)
		}
		crawlFactory.Shutdown()
		kubeFactory.Shutdown()
	})
	return h
}

type proxyOption func(*crawlv1alpha1.Proxy)

// external is an External Proxy at proxyAddr whose health check fetches
// url every second with a 500ms timeout.
func external(t *testing.T, name, proxyAddr, url string, opts ...proxyOption) *crawlv1alpha1.Proxy {
	t.Helper()
	host, port, err := net.SplitHostPort(proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:     crawlv1alpha1.ModeExternal,
			Endpoint: &crawlv1alpha1.Endpoint{Host: host, Port: int32(n)},
			HealthCheck: crawlv1alpha1.HealthCheck{
				URL:              url,
				Interval:         &metav1.Duration{Duration: interval},
				Timeout:          &metav1.Duration{Duration: timeout},
				SuccessThreshold: 1,
				FailureThreshold: 3,
			},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func successThreshold(n int32) proxyOption {
	return func(p *crawlv1alpha1.Proxy) { p.Spec.HealthCheck.SuccessThreshold = n }
}

func authSecret(name string) proxyOption {
	return func(p *crawlv1alpha1.Proxy) {
		p.Spec.Auth = &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: name}}
	}
}

func (h *harness) create(p *crawlv1alpha1.Proxy) time.Time {
	h.t.Helper()
	if _, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	return time.Now()
}

// createSecret creates a credentials Secret marked for proxies.
func (h *harness) createSecret(name, user, pass string) {
	h.t.Helper()
	_, err := h.kube.CoreV1().Secrets(h.ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: markedForProxies},
		Data:       map[string][]byte{"username": []byte(user), "password": []byte(pass)},
	}, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) get(name string) *crawlv1alpha1.Proxy {
	h.t.Helper()
	p, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// waitForPhase polls until the proxy has phase, failing after within; it
// returns the proxy and how long it took since `since`.
func (h *harness) waitForPhase(name string, phase crawlv1alpha1.ProxyPhase, since time.Time, within time.Duration) (*crawlv1alpha1.Proxy, time.Duration) {
	h.t.Helper()
	var p *crawlv1alpha1.Proxy
	ctx, cancel := context.WithTimeout(context.Background(), within+time.Until(since))
	defer cancel()
	err := eventually.Poll(ctx, 20*time.Millisecond, eventually.Holds(func() (bool, string) {
		p = h.get(name)
		return p.Status.Phase == phase, "phase " + string(p.Status.Phase)
	}))
	took := time.Since(since)
	if err != nil {
		h.t.Fatalf("%s: phase %q after %v, want %q within %v; conditions %+v", name, p.Status.Phase, took.Round(time.Millisecond), phase, within, p.Status.Conditions)
	}
	h.t.Logf("%s: %s after %v (bound %v)", name, phase, took.Round(time.Millisecond), within)
	return p, took
}

// waitForProbes polls until the engine has probed the proxy n more times.
func (h *harness) waitForProbes(name string, n int) {
	h.t.Helper()
	key := cache.NewObjectName(h.ns, name)
	want := h.metrics.count(key) + n
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n)*interval+slack)
	defer cancel()
	err := eventually.Poll(ctx, 20*time.Millisecond, eventually.Holds(func() (bool, string) {
		return h.metrics.count(key) >= want, "too few probes"
	}))
	if err != nil {
		h.t.Fatalf("%s: %d probes, want %d", name, h.metrics.count(key), want)
	}
}

func healthyCondition(p *crawlv1alpha1.Proxy) metav1.Condition {
	if c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionHealthy); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// TestProxiesBecomeReady: a tinyproxy and a forward-proxy become Ready
// within successThreshold intervals, and then stay so without a status
// write while the engine keeps probing.
func TestProxiesBecomeReady(t *testing.T) {
	t.Parallel()
	target := proxytest.StartHTTPSTarget(t)
	h := start(t, proxytest.RootCAs(target))
	tests := map[string]struct {
		start     func(testing.TB, proxytest.Options) *proxytest.Proxy
		threshold int32
	}{
		"tinyproxy":     {start: proxytest.StartTinyproxy, threshold: 1},
		"forward-proxy": {start: proxytest.StartBinary, threshold: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			px := tc.start(t, proxytest.Options{Verbosity: 2})
			created := h.create(external(t, name, px.Addr, target.URL+"/generate_204", successThreshold(tc.threshold)))
			p, _ := h.waitForPhase(name, crawlv1alpha1.PhaseReady, created, time.Duration(tc.threshold)*interval+slack)
			if c := healthyCondition(p); c.Reason != controller.ReasonProbeSucceeded || !strings.HasPrefix(c.Message, "target answered 204 in ") {
				t.Errorf("Healthy condition %+v, want a successful probe", c)
			}
			if p.Status.LastHealthCheckTime == nil {
				t.Error("lastHealthCheckTime not set")
			}

			// Steady state: probes go on, status does not move.
			h.waitForProbes(name, 3)
			if later := h.get(name); later.ResourceVersion != p.ResourceVersion {
				t.Errorf("status written in steady state: %+v, was %+v", later.Status, p.Status)
			}
		})
	}
}

// TestKilledProxyBecomesUnhealthyThenReady: a forward-proxy process killed
// turns Unhealthy within failureThreshold intervals plus the timeout, and
// Ready again once it listens on the same port.
func TestKilledProxyBecomesUnhealthyThenReady(t *testing.T) {
	t.Parallel()
	target := proxytest.StartHTTPSTarget(t)
	h := start(t, proxytest.RootCAs(target))
	px := proxytest.StartBinary(t, proxytest.Options{Verbosity: 2})
	p := external(t, "fp", px.Addr, target.URL+"/generate_204")
	created := h.create(p)
	h.waitForPhase("fp", crawlv1alpha1.PhaseReady, created, interval+slack)

	if err := px.Terminate(t); err != nil {
		t.Fatalf("forward-proxy exit: %v", err)
	}
	killed := time.Now()
	failures := time.Duration(p.Spec.HealthCheck.FailureThreshold)
	unhealthy, _ := h.waitForPhase("fp", crawlv1alpha1.PhaseUnhealthy, killed, failures*interval+timeout+slack)
	if c := healthyCondition(unhealthy); c.Reason != controller.ReasonProbeFailed || c.Message != "connecting to the proxy: connection refused" {
		t.Errorf("Healthy condition %+v, want the refused connection", c)
	}
	if unhealthy.Status.LatencyMillis != 0 {
		t.Errorf("latencyMillis %d on an unhealthy proxy, want 0", unhealthy.Status.LatencyMillis)
	}

	restarted := proxytest.StartBinary(t, proxytest.Options{Verbosity: 2, Args: []string{"--listen=" + px.Addr}})
	if restarted.Addr != px.Addr {
		t.Fatalf("restarted on %s, want %s", restarted.Addr, px.Addr)
	}
	h.waitForPhase("fp", crawlv1alpha1.PhaseReady, time.Now(), interval+slack)
}

// TestProxyCredentials: spec.auth credentials from a Secret reach the proxy;
// wrong ones make it Unhealthy with a message naming 407 and never the
// password.
func TestProxyCredentials(t *testing.T) {
	t.Parallel()
	const user, pass = "crawler", "Zq8-right-horse-battery"
	httpsTarget := proxytest.StartHTTPSTarget(t)
	httpTarget := proxytest.StartHTTPTarget(t)
	h := start(t, proxytest.RootCAs(httpsTarget))
	px := proxytest.StartInProcess(t, proxytest.Options{Username: user, Password: pass, Verbosity: 2})
	tests := map[string]struct {
		password    string
		url         string
		wantPhase   crawlv1alpha1.ProxyPhase
		wantMessage string // prefix
	}{
		"right password, https target": {password: pass, url: httpsTarget.URL + "/generate_204",
			wantPhase: crawlv1alpha1.PhaseReady, wantMessage: "target answered 204 in "},
		"right password, http target": {password: pass, url: httpTarget.URL + "/generate_204",
			wantPhase: crawlv1alpha1.PhaseReady, wantMessage: "target answered 204 in "},
		"wrong password, https target": {password: pass + "-old", url: httpsTarget.URL + "/generate_204",
			wantPhase: crawlv1alpha1.PhaseUnhealthy, wantMessage: "proxy answered 407 Proxy Authentication Required"},
		"wrong password, http target": {password: pass + "-old", url: httpTarget.URL + "/generate_204",
			wantPhase: crawlv1alpha1.PhaseUnhealthy, wantMessage: "proxy answered 407 Proxy Authentication Required"},
	}
	i := 0
	for name, tc := range tests {
		i++
		proxyName := fmt.Sprintf("px-%d", i)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h.createSecret(proxyName, user, tc.password)
			created := h.create(external(t, proxyName, px.Addr, tc.url, authSecret(proxyName)))
			// Three failures make the first unhealthy verdict.
			p, _ := h.waitForPhase(proxyName, tc.wantPhase, created, 3*interval+timeout+slack)
			c := healthyCondition(p)
			if !strings.HasPrefix(c.Message, tc.wantMessage) {
				t.Errorf("Healthy condition message %q, want it to start with %q", c.Message, tc.wantMessage)
			}
			if strings.Contains(c.Message, pass) {
				t.Errorf("the condition message leaks the password: %q", c.Message)
			}
		})
	}
}

// recorded is one request a recording server saw.
type recorded struct {
	Method, Host, Path string
	TLS                bool
	ProxyAuthorization string
}

type recorder struct {
	mu   sync.Mutex
	seen []recorded
}

func (r *recorder) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.seen = append(r.seen, recorded{Method: req.Method, Host: req.Host, Path: req.URL.Path, TLS: req.TLS != nil,
			ProxyAuthorization: req.Header.Get("Proxy-Authorization")})
		r.mu.Unlock()
		next.ServeHTTP(w, req)
	})
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.seen...)
}

// TestHTTPSProbeThroughConnect: an https probe reaches the target through a
// CONNECT tunnel, with TLS end to end: the proxy sees only CONNECT, the
// target sees the GET (and never the proxy credentials).
func TestHTTPSProbeThroughConnect(t *testing.T) {
	t.Parallel()
	const user, pass = "crawler", "tunnel-pass-3321"
	var targetSaw, proxySaw recorder
	target := httptest.NewTLSServer(targetSaw.wrap(proxytest.TargetHandler()))
	t.Cleanup(target.Close)
	fp, err := forwardproxy.New(forwardproxy.Config{Username: user, Password: pass, AllowCIDRs: []netip.Prefix{proxytest.Loopback}})
	if err != nil {
		t.Fatal(err)
	}
	proxySrv := httptest.NewServer(proxySaw.wrap(fp))
	t.Cleanup(func() {
		proxySrv.Close()
		_ = fp.Close()
	})

	h := start(t, proxytest.RootCAs(target))
	h.createSecret("creds", user, pass)
	created := h.create(external(t, "tunnel", proxySrv.Listener.Addr().String(), target.URL+"/generate_204", authSecret("creds")))
	h.waitForPhase("tunnel", crawlv1alpha1.PhaseReady, created, interval+slack)

	targetHost := target.Listener.Addr().String()
	for _, r := range proxySaw.all() {
		if r.Method != http.MethodConnect || r.Host != targetHost || r.ProxyAuthorization == "" {
			t.Errorf("the proxy saw %+v, want only authenticated CONNECTs to %s", r, targetHost)
		}
	}
	got := targetSaw.all()
	if len(got) == 0 {
		t.Fatal("the target saw no request")
	}
	for _, r := range got {
		if r.Method != http.MethodGet || r.Path != "/generate_204" || !r.TLS || r.ProxyAuthorization != "" {
			t.Errorf("the target saw %+v, want a TLS GET /generate_204 without proxy credentials", r)
		}
	}
	if len(proxySaw.all()) < len(got) {
		t.Errorf("%d CONNECTs for %d target requests: a tunnel was reused", len(proxySaw.all()), len(got))
	}
}
