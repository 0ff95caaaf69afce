package gatewayintegration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"sigs.k8s.io/yaml"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/failover"
	"github.com/proxyfleet/proxy-operator/pkg/lease/feed"
	"github.com/proxyfleet/proxy-operator/pkg/lease/server"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// apiServer is the package's real API server, started on first use.
var apiServer = testenv.NewShared(testenv.Options{})

func TestMain(m *testing.M) { os.Exit(apiServer.Run(m)) }

var leaseKey = []byte("gateway-integration-key-32-bytes")

// syncBuffer collects the gateway's and the lease API's logs, so that tests
// can check what they say, and what they do not (credentials).
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// harness is the lease API on a lease store fed by real Proxy, Secret and
// CrawlPolicy informers, and a gateway-tier replica that calls it over HTTP
// for its callers (tierDoors), as `proxy-operator gateway` does; both
// authenticate with the real API server.
type harness struct {
	env      *testenv.Environment
	kube     kubernetes.Interface
	crawl    versioned.Interface
	store    *store.Store
	leaseURL string
	// gatewayAddr is the gateway's 127.0.0.1:port.
	gatewayAddr string
	gw          *gateway.Gateway
	logs        *syncBuffer
	ns          string
}

type harnessOptions struct {
	wait        time.Duration
	sessionIdle time.Duration
	// gatewayAuth tunes the gateway's review budgets.
	gatewayAuth auth.KubernetesOptions
}

func startHarness(t *testing.T, ns string, opts harnessOptions) *harness {
	t.Helper()
	logs := &syncBuffer{}
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(6), textlogger.Output(logs)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	env := apiServer.Get(t)
	h := &harness{env: env, kube: kubernetes.NewForConfigOrDie(env.Config), crawl: versioned.NewForConfigOrDie(env.Config), logs: logs, ns: ns}
	if _, err := h.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	st, err := store.New(store.Config{Key: leaseKey, DefaultTTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h.store = st
	factory := crawlinformers.NewSharedInformerFactoryWithOptions(h.crawl, 0, crawlinformers.WithNamespace(ns))
	kubeFactory := informers.NewSharedInformerFactoryWithOptions(h.kube, 0, informers.WithNamespace(ns))
	proxies := factory.Crawl().V1alpha1().Proxies()
	secrets := kubeFactory.Core().V1().Secrets()
	proxiesSynced, err := feed.Proxies(st, proxies)
	if err != nil {
		t.Fatal(err)
	}
	secretsSynced := secrets.Informer().HasSynced
	policiesSynced, err := feed.CrawlPolicies(st, factory.Crawl().V1alpha1().CrawlPolicies(), nil)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	kubeFactory.Start(ctx.Done())
	auth := auth.NewKubernetes(h.kube, auth.KubernetesOptions{CacheTTL: time.Second})
	srv, err := server.New(server.Config{
		Store: st, Authenticator: auth, Authorizer: auth,
		Credentials: feed.NewLeaseCredentials(proxies.Lister(), secrets.Lister(), nil).For,
		Horizon:     &failover.MemoryHorizon{},
	})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "informers synced", func() bool { return proxiesSynced() && secretsSynced() && policiesSynced() })
	if err := srv.StartLeading(ctx); err != nil {
		t.Fatal(err)
	}
	api := httptest.NewUnstartedServer(srv.Handler())
	api.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	api.Start()
	h.leaseURL = api.URL

	leases, authn, authz := h.tierDoors(t, opts.gatewayAuth)
	h.gw, err = gateway.New(gateway.Config{
		Leases: leases, Authenticator: authn, Authorizer: authz,
		Wait: opts.wait, SessionIdle: opts.sessionIdle, JanitorInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.gatewayAddr = ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- h.gw.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("gateway Serve: %v", err)
		}
		api.Close()
		factory.Shutdown()
		kubeFactory.Shutdown()
		if t.Failed() {
			t.Logf("gateway and lease API logs:\n%s", logs.String())
		}
	})
	return h
}

// upstream is a real proxy process registered as an External Proxy.
type upstream struct {
	name     string
	proxy    *proxytest.Proxy
	password string
	obj      *crawlv1alpha1.Proxy
}

// addUpstream creates an External Proxy for p with maxLeases 1 in pool,
// its credentials in a Secret (when given), and marks it Ready as the
// controller would after a good probe.
func (h *harness) addUpstream(t *testing.T, name, pool string, p *proxytest.Proxy, user, password string, latency int64) *upstream {
	t.Helper()
	ctx := t.Context()
	host, port, err := net.SplitHostPort(p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	var portN int32
	fmt.Sscan(port, &portN)
	obj := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name, Labels: map[string]string{gateway.PoolLabel: pool}},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:      crawlv1alpha1.ModeExternal,
			Endpoint:  &crawlv1alpha1.Endpoint{Host: host, Port: portN},
			MaxLeases: 1,
		},
	}
	if user != "" {
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name + "-auth", Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}},
			StringData: map[string]string{crawlv1alpha1.AuthUsernameKey: user, crawlv1alpha1.AuthPasswordKey: password},
		}
		if _, err := h.kube.CoreV1().Secrets(h.ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		obj.Spec.Auth = &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: secret.Name}}
	}
	created, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{name: name, proxy: p, password: password, obj: created}
	h.setPhase(t, u, crawlv1alpha1.PhaseReady, latency)
	return u
}

// setPhase writes the status the controller would write.
func (h *harness) setPhase(t *testing.T, u *upstream, phase crawlv1alpha1.ProxyPhase, latency int64) {
	t.Helper()
	host, port, _ := net.SplitHostPort(u.proxy.Addr)
	var portN int32
	fmt.Sscan(port, &portN)
	healthy := metav1.ConditionTrue
	if phase != crawlv1alpha1.PhaseReady {
		healthy = metav1.ConditionFalse
	}
	// A conflict (the cache behind a write) is tried again; any other
	// error fails at once.
	eventually.Check(t, 30*time.Second, 50*time.Millisecond, "status of "+u.name, func(ctx context.Context) error {
		cur, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Get(ctx, u.name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("%w: %w", eventually.ErrHopeless, err)
		}
		now := metav1.Now()
		cur.Status = crawlv1alpha1.ProxyStatus{
			Phase: phase, IP: host, Port: portN, LatencyMillis: latency,
			Conditions: []metav1.Condition{
				{Type: crawlv1alpha1.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: "ExternalEndpoint", Message: "test", LastTransitionTime: now},
				{Type: crawlv1alpha1.ConditionHealthy, Status: healthy, Reason: "Probe", Message: "test", LastTransitionTime: now},
			},
		}
		_, err = h.crawl.CrawlV1alpha1().Proxies(h.ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("%w: %w", eventually.ErrHopeless, err)
		}
		return err
	})
	key := u.name
	poll(t, fmt.Sprintf("the store sees %s %s", key, phase), func() bool {
		ready := false
		for _, p := range h.store.Proxies(h.ns, nil) {
			if p.Key.Name == key {
				ready = true
			}
		}
		return ready == (phase == crawlv1alpha1.PhaseReady)
	})
}

// crawler creates a ServiceAccount in the harness's namespace, bound (or
// not) to artifacts/rbac/crawler-role.yaml's ClusterRole there, and returns
// its token once the authorizer agrees.
func (h *harness) crawler(t *testing.T, name string, bound bool) string {
	t.Helper()
	ctx := t.Context()
	token, err := h.env.ServiceAccountToken(ctx, h.ns, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bound {
		return token
	}
	role := artifactRole(t, "crawler-role.yaml")
	if _, err := h.kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: h.ns, Name: name}},
	}
	if _, err := h.kube.RbacV1().RoleBindings(h.ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// Wait until the RBAC authorizer has the binding, asking as the
	// crawler itself, so that no denial from before gets cached.
	self := kubernetes.NewForConfigOrDie(h.env.UserConfig(token))
	poll(t, "the crawler Role reaches the authorizer", func() bool {
		return canLease(ctx, self, h.ns)
	})
	return token
}

// artifactRole is a ClusterRole of artifacts/rbac.
func artifactRole(t *testing.T, file string) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "artifacts", "rbac", file))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(data, &role); err != nil {
		t.Fatal(err)
	}
	return &role
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := proxytest.Poll(30*time.Second, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// gatewayURL is the proxy URL a crawler configures.
func (h *harness) gatewayURL(username, token string) string {
	return "http://" + username + ":" + token + "@" + h.gatewayAddr
}

// gatewayLeases are the live leases the gateway holds in the namespace.
func (h *harness) gatewayLeases(t *testing.T) []store.Lease {
	t.Helper()
	all, err := h.store.List(store.LeaseFilter{Namespace: h.ns})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Lease
	for _, l := range all {
		if strings.HasPrefix(l.Holder, "gateway:") {
			out = append(out, l)
		}
	}
	return out
}

// target serves /echo (the request as received, in JSON) and /status/N.
func startTarget(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/echo", proxytest.TargetHandler())
	mux.HandleFunc("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		var code int
		fmt.Sscan(r.PathValue("code"), &code)
		w.WriteHeader(code)
		fmt.Fprintf(w, "status %d\n", code)
	})
	var banned sync.Map
	// /ban-once/{id}: 429 the first time, 200 after: a site that banned one proxy.
	mux.HandleFunc("/ban-once/{id}", func(w http.ResponseWriter, r *http.Request) {
		if _, seen := banned.LoadOrStore(r.PathValue("id"), true); !seen {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprintln(w, "welcome back")
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// canLease asks the API server, as the crawler, whether it may create
// proxies/leases in ns.
func canLease(ctx context.Context, self kubernetes.Interface, ns string) bool {
	review, err := self.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: "create", Group: crawlv1alpha1.SchemeGroupVersion.Group, Resource: "proxies", Subresource: "leases",
		}},
	}, metav1.CreateOptions{})
	return err == nil && review.Status.Allowed
}
