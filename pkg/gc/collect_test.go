package gc_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawlscheme "github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned/scheme"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	crawllisters "github.com/proxyfleet/proxy-operator/pkg/generated/listers/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/fake"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

var apiServer = testenv.NewShared(testenv.Options{})

func TestMain(m *testing.M) { os.Exit(apiServer.Run(m)) }

const (
	local = crawlv1alpha1.ProviderLocal
	gce   = crawlv1alpha1.ProviderGCE
)

// event is one event a collector recorded.
type event struct {
	Ref                   corev1.ObjectReference
	Type, Reason, Message string
}

// eventLog is a record.EventRecorder that keeps what it is given.
type eventLog struct {
	mu     sync.Mutex
	events []event
}

func (l *eventLog) Event(obj runtime.Object, eventtype, reason, message string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ref corev1.ObjectReference
	if r, ok := obj.(*corev1.ObjectReference); ok {
		ref = *r
	}
	l.events = append(l.events, event{Ref: ref, Type: eventtype, Reason: reason, Message: message})
}

func (l *eventLog) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	l.Event(obj, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (l *eventLog) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	l.Eventf(obj, eventtype, reason, messageFmt, args...)
}

func (l *eventLog) all() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// metricLog records ObserveCollected and signals once per provider and
// round.
type metricLog struct {
	mu        sync.Mutex
	collected map[string]int // provider → count, every reason
	byReason  map[string]int // "provider/reason" → count
	calls     map[string]int // "provider/op" → count
	observed  chan string
}

func newMetricLog() *metricLog {
	return &metricLog{collected: map[string]int{}, byReason: map[string]int{}, calls: map[string]int{}, observed: make(chan string, 100)}
}

func (m *metricLog) ObserveCollected(providerName, reason string, n int) {
	m.mu.Lock()
	m.collected[providerName] += n
	m.byReason[providerName+"/"+reason] += n
	m.mu.Unlock()
	if reason != gc.CollectedOrphaned {
		return
	}
	select {
	case m.observed <- providerName:
	default:
	}
}

// ObserveProviderCall counts calls per "provider/op" beside the deletions.
func (m *metricLog) ObserveProviderCall(providerName, op string, _ error) {
	m.mu.Lock()
	m.calls[providerName+"/"+op]++
	m.mu.Unlock()
}

func (m *metricLog) snapshot() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for k, v := range m.collected {
		out[k] = v
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// fixture is one namespace on the real API server, fake providers, a cache
// the test controls, and a count of the collector's live reads.
type fixture struct {
	t         *testing.T
	ctx       context.Context
	ns        string
	admin     versioned.Interface
	providers map[crawlv1alpha1.ProviderName]*fake.Provider
	cache     cache.Indexer
	// lister defaults to one over cache.
	lister   crawllisters.ProxyLister
	liveCfg  *rest.Config
	liveGets atomic.Int32
	events   *eventLog
	metrics  *metricLog
}

func newFixture(t *testing.T) *fixture {
	env := apiServer.Get(t)
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	ns, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gc-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{
		t:         t,
		ctx:       ctx,
		ns:        ns.Name,
		admin:     versioned.NewForConfigOrDie(env.Config),
		providers: map[crawlv1alpha1.ProviderName]*fake.Provider{local: fake.New(), gce: fake.New()},
		cache:     cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		liveCfg:   rest.CopyConfig(env.Config),
		events:    &eventLog{},
		metrics:   newMetricLog(),
	}
	f.lister = crawllisters.NewProxyLister(f.cache)
	return f
}

func (f *fixture) createProxy(name string, modify ...func(*crawlv1alpha1.Proxy)) *crawlv1alpha1.Proxy {
	f.t.Helper()
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec:       crawlv1alpha1.ProxySpec{Provider: local},
	}
	for _, m := range modify {
		m(p)
	}
	created, err := f.admin.CrawlV1alpha1().Proxies(f.ns).Create(f.ctx, p, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return created
}

// cacheHolds puts p into the informer cache the collector reads.
func (f *fixture) cacheHolds(p *crawlv1alpha1.Proxy) {
	f.t.Helper()
	if err := f.cache.Add(p); err != nil {
		f.t.Fatal(err)
	}
}

// inject gives prov an instance tagged for the Proxy ns/name/uid, as the
// controller would have created it, and returns its id.
func (f *fixture) inject(prov crawlv1alpha1.ProviderName, name string, uid types.UID, modifyTags ...func(map[string]string)) string {
	p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, UID: uid}}
	tags := provider.Tags(p)
	for _, m := range modifyTags {
		m(tags)
	}
	id := provider.InstanceName(uid)
	f.providers[prov].Inject(provider.Instance{ID: id, IP: "127.0.0.2", Port: 3128, Tags: tags})
	return id
}

func without(key string) func(map[string]string) {
	return func(tags map[string]string) { delete(tags, key) }
}

func (f *fixture) collector() *gc.Collector {
	f.t.Helper()
	cfg := rest.CopyConfig(f.liveCfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/proxies/") {
				f.liveGets.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	providers := map[crawlv1alpha1.ProviderName]provider.Provider{}
	for name, p := range f.providers {
		providers[name] = p
	}
	c, err := gc.New(gc.Config{
		Providers: providers,
		Proxies:   f.lister,
		Live:      versioned.NewForConfigOrDie(cfg),
		Interval:  time.Minute,
		Recorder:  f.events,
		Metrics:   f.metrics,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// remaining returns the ids each fake provider still holds.
func (f *fixture) remaining() map[crawlv1alpha1.ProviderName][]string {
	out := map[crawlv1alpha1.ProviderName][]string{}
	for name, p := range f.providers {
		for _, inst := range p.Instances() {
			out[name] = append(out[name], inst.ID)
		}
	}
	return out
}

// expected is what a table row expects, filled in by its setup.
type expected struct {
	kept map[crawlv1alpha1.ProviderName][]string
	// gone are the instances that must be deleted, with the Proxy each was
	// tagged for (for the event).
	gone []goneInstance
}

type goneInstance struct {
	provider crawlv1alpha1.ProviderName
	id       string
	name     string
	uid      types.UID
}

func (e *expected) keep(prov crawlv1alpha1.ProviderName, id string) {
	if e.kept == nil {
		e.kept = map[crawlv1alpha1.ProviderName][]string{}
	}
	e.kept[prov] = append(e.kept[prov], id)
}

func (e *expected) delete(prov crawlv1alpha1.ProviderName, id, name string, uid types.UID) {
	e.gone = append(e.gone, goneInstance{prov, id, name, uid})
}

func TestCollectOnce(t *testing.T) {
	env := apiServer.Get(t)
	tests := map[string]struct {
		setup        func(f *fixture, want *expected)
		wantLiveGets int32
		wantErr      string
	}{
		"an instance whose Proxy does not exist is deleted": {
			setup: func(f *fixture, want *expected) {
				uid := uuid.NewUUID()
				want.delete(local, f.inject(local, "gone", uid), "gone", uid)
			},
			wantLiveGets: 1,
		},
		"an instance whose Proxy is in the cache is kept without a live read": {
			setup: func(f *fixture, want *expected) {
				p := f.createProxy("p1")
				f.cacheHolds(p)
				want.keep(local, f.inject(local, "p1", p.UID))
			},
		},
		"stale cache (empty): the Proxy exists, the live read finds it, the instance is kept": {
			setup: func(f *fixture, want *expected) {
				p := f.createProxy("p1")
				want.keep(local, f.inject(local, "p1", p.UID))
			},
			wantLiveGets: 1,
		},
		"stale cache (an informer that never synced): kept after the live read": {
			setup: func(f *fixture, want *expected) {
				p := f.createProxy("p1")
				f.lister = crawlinformers.NewSharedInformerFactory(f.admin, 0).Crawl().V1alpha1().Proxies().Lister()
				want.keep(local, f.inject(local, "p1", p.UID))
			},
			wantLiveGets: 1,
		},
		"a Proxy recreated under the same name: its predecessor's instance is deleted": {
			setup: func(f *fixture, want *expected) {
				p := f.createProxy("p1")
				old := uuid.NewUUID()
				want.delete(local, f.inject(local, "p1", old), "p1", old)
				want.keep(local, f.inject(local, "p1", p.UID))
			},
			wantLiveGets: 2,
		},
		"a recreated Proxy in the cache: the old UID is not, and is confirmed gone": {
			setup: func(f *fixture, want *expected) {
				p := f.createProxy("p1")
				f.cacheHolds(p)
				old := uuid.NewUUID()
				want.delete(local, f.inject(local, "p1", old), "p1", old)
				want.keep(local, f.inject(local, "p1", p.UID))
			},
			wantLiveGets: 1,
		},
		"a Proxy being deleted (held by a finalizer) keeps its instance": {
			setup: func(f *fixture, want *expected) {
				p := f.createProxy("p1", func(p *crawlv1alpha1.Proxy) { p.Finalizers = []string{"test.proxyfleet.io/hold"} })
				if err := f.admin.CrawlV1alpha1().Proxies(f.ns).Delete(f.ctx, "p1", metav1.DeleteOptions{}); err != nil {
					f.t.Fatal(err)
				}
				want.keep(local, f.inject(local, "p1", p.UID))
			},
			wantLiveGets: 1,
		},
		"an instance without a proxy-uid tag is never touched": {
			setup: func(f *fixture, want *expected) {
				want.keep(local, f.inject(local, "gone", uuid.NewUUID(), without(crawlv1alpha1.TagProxyUID)))
			},
		},
		"an instance without namespace/name tags cannot be confirmed and is kept": {
			setup: func(f *fixture, want *expected) {
				want.keep(local, f.inject(local, "gone", uuid.NewUUID(), without(crawlv1alpha1.TagProxyNamespace)))
			},
		},
		"an instance not managed by us is not even listed": {
			setup: func(f *fixture, want *expected) {
				want.keep(local, f.inject(local, "gone", uuid.NewUUID(), without(crawlv1alpha1.TagManagedBy)))
			},
		},
		"a forbidden live read keeps the instance": {
			setup: func(f *fixture, want *expected) {
				token, err := env.ServiceAccountToken(f.ctx, f.ns, "no-rbac", 0)
				if err != nil {
					f.t.Fatal(err)
				}
				f.liveCfg = env.UserConfig(token)
				want.keep(local, f.inject(local, "gone", uuid.NewUUID()))
			},
			wantLiveGets: 1,
			wantErr:      "is forbidden",
		},
		"an unreachable API server keeps the instance": {
			setup: func(f *fixture, want *expected) {
				f.liveCfg.Host = "https://" + proxytest.ClosedAddr(f.t)
				want.keep(local, f.inject(local, "gone", uuid.NewUUID()))
			},
			wantLiveGets: 1,
			wantErr:      "connection refused",
		},
		"a 404 that names no Proxy (the resource is not served) keeps the instance": {
			setup: func(f *fixture, want *expected) {
				f.liveCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
					return roundTripFunc(func(r *http.Request) (*http.Response, error) {
						r = r.Clone(r.Context())
						r.URL.Path = strings.Replace(r.URL.Path, crawlv1alpha1.GroupName, "uninstalled.proxyfleet.io", 1)
						return rt.RoundTrip(r)
					})
				})
				want.keep(local, f.inject(local, "gone", uuid.NewUUID()))
			},
			wantLiveGets: 1,
			wantErr:      "the server could not find the requested resource",
		},
		"orphans on every provider are collected": {
			setup: func(f *fixture, want *expected) {
				a, b := uuid.NewUUID(), uuid.NewUUID()
				want.delete(local, f.inject(local, "a", a), "a", a)
				want.delete(gce, f.inject(gce, "b", b), "b", b)
			},
			wantLiveGets: 2,
		},
		"a provider that cannot list does not stop the others": {
			setup: func(f *fixture, want *expected) {
				f.providers[local].FailNext(fake.OpList, provider.Transient(errors.New("cloud API down")), 1)
				a, b := uuid.NewUUID(), uuid.NewUUID()
				want.keep(local, f.inject(local, "a", a))
				want.delete(gce, f.inject(gce, "b", b), "b", b)
			},
			wantLiveGets: 1,
			wantErr:      "provider local: listing instances: cloud API down",
		},
		"a failed delete keeps the instance for the next round": {
			setup: func(f *fixture, want *expected) {
				f.providers[local].FailNext(fake.OpDelete, provider.Transient(errors.New("busy")), 1)
				want.keep(local, f.inject(local, "gone", uuid.NewUUID()))
			},
			wantLiveGets: 1,
			wantErr:      "deleting orphaned instance",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			var want expected
			tc.setup(f, &want)
			c := f.collector()

			deleted, err := c.CollectOnce(f.ctx)
			if tc.wantErr == "" && err != nil {
				t.Errorf("CollectOnce: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("CollectOnce: %v, want an error containing %q", err, tc.wantErr)
			}
			if deleted != len(want.gone) {
				t.Errorf("deleted %d, want %d", deleted, len(want.gone))
			}
			wantKept := map[crawlv1alpha1.ProviderName][]string{}
			for p, ids := range want.kept {
				wantKept[p] = slices.Sorted(slices.Values(ids))
			}
			if diff := gocmp.Diff(wantKept, f.remaining()); diff != "" {
				t.Errorf("instances left (-want +got):\n%s", diff)
			}
			if got := f.liveGets.Load(); got != tc.wantLiveGets {
				t.Errorf("%d live reads, want %d", got, tc.wantLiveGets)
			}

			// A round visits providers by name and their instances by id.
			slices.SortFunc(want.gone, func(a, b goneInstance) int {
				return cmp.Or(strings.Compare(string(a.provider), string(b.provider)), strings.Compare(a.id, b.id))
			})
			var wantEvents []event
			wantMetrics := map[string]int{string(local): 0, string(gce): 0}
			for _, g := range want.gone {
				wantEvents = append(wantEvents, event{
					Ref: corev1.ObjectReference{APIVersion: "crawl.proxyfleet.io/v1alpha1", Kind: "Proxy",
						Namespace: f.ns, Name: g.name, UID: g.uid},
					Type: corev1.EventTypeNormal, Reason: gc.ReasonOrphanDeleted,
				})
				wantMetrics[string(g.provider)]++
			}
			gotEvents := f.events.all()
			for i := range gotEvents {
				if i < len(want.gone) && !strings.Contains(gotEvents[i].Message, want.gone[i].id) {
					t.Errorf("event %q does not name instance %s", gotEvents[i].Message, want.gone[i].id)
				}
				gotEvents[i].Message = ""
			}
			if diff := gocmp.Diff(wantEvents, gotEvents); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if diff := gocmp.Diff(wantMetrics, f.metrics.snapshot()); diff != "" {
				t.Errorf("collected metric (-want +got):\n%s", diff)
			}
		})
	}
}

// Run collects at once, then every interval: an orphan that appears after
// a round is gone within one more interval.
func TestRunCollectsWithinOneInterval(t *testing.T) {
	env := apiServer.Get(t)
	f := newFixture(t)
	delete(f.providers, gce)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	const interval = 5 * time.Minute
	live := versioned.NewForConfigOrDie(env.Config)
	c, err := gc.New(gc.Config{
		Providers: map[crawlv1alpha1.ProviderName]provider.Provider{local: f.providers[local]},
		Proxies:   f.lister,
		Live:      live,
		Interval:  interval,
		Metrics:   f.metrics,
		Clock:     clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	atStart := uuid.NewUUID()
	first := f.inject(local, "before", atStart)

	ctx, cancel := context.WithCancel(f.ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(ctx) }()
	waitForRound := func() {
		t.Helper()
		select {
		case <-f.metrics.observed:
		case <-time.After(30 * time.Second):
			t.Fatal("no collection round within 30s")
		}
	}
	waitForRound()
	if _, ok := f.providers[local].Instance(first); ok {
		t.Error("the first round, at start, kept an orphan")
	}

	later := uuid.NewUUID()
	second := f.inject(local, "after", later)
	eventually.Check(t, 10*time.Second, 5*time.Millisecond, "Run waiting on its ticker", eventually.Holds(func() (bool, string) {
		return clk.HasWaiters(), "Run is not waiting on its ticker"
	}))
	clk.Step(interval - time.Second)
	if _, ok := f.providers[local].Instance(second); !ok {
		t.Fatal("collected before the interval passed")
	}
	clk.Step(time.Second)
	waitForRound()
	if _, ok := f.providers[local].Instance(second); ok {
		t.Error("an orphan survived one interval")
	}

	cancel()
	if err := <-runDone; err != nil {
		t.Errorf("Run: %v", err)
	}
	if diff := gocmp.Diff(map[string]int{string(local): 2}, f.metrics.snapshot()); diff != "" {
		t.Errorf("collected (-want +got):\n%s", diff)
	}
	f.metrics.mu.Lock()
	lists, deletes := f.metrics.calls[string(local)+"/list"], f.metrics.calls[string(local)+"/delete"]
	f.metrics.mu.Unlock()
	if lists < 2 || deletes != 2 {
		t.Errorf("provider calls counted: %d lists, %d deletes; want a list per round (>= 2) and 2 deletes", lists, deletes)
	}
}

// Run's first round waits for the cache, so that a cold start does not turn
// every instance into a live read.
func TestRunWaitsForTheCache(t *testing.T) {
	env := apiServer.Get(t)
	f := newFixture(t)
	var synced atomic.Bool
	listedBeforeSync := atomic.Bool{}
	prov := &listSpy{Provider: f.providers[local], onList: func() {
		if !synced.Load() {
			listedBeforeSync.Store(true)
		}
	}}
	var calls atomic.Int32
	c, err := gc.New(gc.Config{
		Providers: map[crawlv1alpha1.ProviderName]provider.Provider{local: prov},
		Proxies:   f.lister,
		ProxiesSynced: func() bool {
			if calls.Add(1) >= 3 {
				synced.Store(true)
			}
			return synced.Load()
		},
		Live:     versioned.NewForConfigOrDie(env.Config),
		Interval: time.Hour,
		Metrics:  f.metrics,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(ctx) }()
	select {
	case <-f.metrics.observed:
	case <-time.After(30 * time.Second):
		t.Fatal("no round within 30s")
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Errorf("Run: %v", err)
	}
	if listedBeforeSync.Load() {
		t.Error("Run listed instances before the cache synced")
	}
}

type listSpy struct {
	provider.Provider
	onList func()
}

func (s *listSpy) ListByTag(ctx context.Context, key, value string) ([]provider.Instance, error) {
	s.onList()
	return s.Provider.ListByTag(ctx, key, value)
}

// With a real recorder, the event lands in the vanished Proxy's namespace,
// naming it, so `kubectl get events -n <ns>` shows it.
func TestEventLandsInTheProxysNamespace(t *testing.T) {
	env := apiServer.Get(t)
	f := newFixture(t)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	broadcaster := record.NewBroadcaster(record.WithContext(f.ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	scheme := runtime.NewScheme()
	if err := crawlscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	recorder := broadcaster.NewRecorder(scheme, corev1.EventSource{Component: "proxy-operator"})

	uid := uuid.NewUUID()
	id := f.inject(local, "vanished", uid)
	c, err := gc.New(gc.Config{
		Providers: map[crawlv1alpha1.ProviderName]provider.Provider{local: f.providers[local]},
		Proxies:   f.lister,
		Live:      versioned.NewForConfigOrDie(env.Config),
		Interval:  time.Minute,
		Recorder:  recorder,
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.CollectOnce(f.ctx); n != 1 || err != nil {
		t.Fatalf("CollectOnce: %d, %v", n, err)
	}
	var got []corev1.Event
	eventually.Check(t, 30*time.Second, 50*time.Millisecond, "an event in namespace "+f.ns, func(ctx context.Context) error {
		list, err := kube.CoreV1().Events(f.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("%w: %w", eventually.ErrHopeless, err)
		}
		if got = list.Items; len(got) == 0 {
			return errors.New("no event yet")
		}
		return nil
	})
	e := got[0]
	wantRef := corev1.ObjectReference{APIVersion: "crawl.proxyfleet.io/v1alpha1", Kind: "Proxy", Namespace: f.ns, Name: "vanished", UID: uid}
	if diff := gocmp.Diff(wantRef, e.InvolvedObject); diff != "" {
		t.Errorf("involved object (-want +got):\n%s", diff)
	}
	wantMsg := fmt.Sprintf("Deleted orphaned local instance %s: Proxy %s/vanished (uid %s) no longer exists", id, f.ns, uid)
	if e.Reason != gc.ReasonOrphanDeleted || e.Type != corev1.EventTypeNormal || e.Message != wantMsg {
		t.Errorf("event %s %s %q, want Normal %s %q", e.Type, e.Reason, e.Message, gc.ReasonOrphanDeleted, wantMsg)
	}
}

func TestNewValidates(t *testing.T) {
	env := apiServer.Get(t)
	lister := crawllisters.NewProxyLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	live := versioned.NewForConfigOrDie(env.Config)
	tests := map[string]struct {
		cfg     gc.Config
		wantErr string
	}{
		"complete":    {cfg: gc.Config{Proxies: lister, Live: live, Interval: time.Minute}},
		"no lister":   {cfg: gc.Config{Live: live, Interval: time.Minute}, wantErr: "gc: the Proxy lister is required"},
		"no live":     {cfg: gc.Config{Proxies: lister, Interval: time.Minute}, wantErr: "gc: the live client is required"},
		"no interval": {cfg: gc.Config{Proxies: lister, Live: live}, wantErr: "gc: interval must be positive, got 0s"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := gc.New(tc.cfg)
			if tc.wantErr == "" {
				if err != nil {
					t.Errorf("New: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("New: %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// BenchmarkCollectOnceSteadyFleet: a round over 1,000 instances whose
// Proxies are all in the cache makes no API call; the cost is the cache scan.
func BenchmarkCollectOnceSteadyFleet(b *testing.B) {
	env := apiServer.Get(b)
	const fleet = 1000
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	prov := fake.New()
	for i := range fleet {
		p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: "crawl", Name: fmt.Sprintf("p%d", i), UID: uuid.NewUUID()}}
		if err := indexer.Add(p); err != nil {
			b.Fatal(err)
		}
		prov.Inject(provider.Instance{ID: provider.InstanceName(p.UID), Tags: provider.Tags(p)})
	}
	var liveGets atomic.Int32
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			liveGets.Add(1)
			return rt.RoundTrip(r)
		})
	})
	c, err := gc.New(gc.Config{
		Providers: map[crawlv1alpha1.ProviderName]provider.Provider{local: prov},
		Proxies:   crawllisters.NewProxyLister(indexer),
		Live:      versioned.NewForConfigOrDie(cfg),
		Interval:  time.Minute,
	})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if n, err := c.CollectOnce(context.Background()); n != 0 || err != nil {
			b.Fatalf("CollectOnce: %d, %v", n, err)
		}
	}
	if n := liveGets.Load(); n != 0 {
		b.Errorf("%d API calls for a fleet entirely in the cache", n)
	}
}
