package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	crawlfake "github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned/fake"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/fake"
)

const (
	testNamespace = "crawl"
	testUID       = "6f1c2a3b-4d5e-6f70-8192-a3b4c5d6e7f8"
	testInstance  = "px-6f1c2a3b4d5e6f70" // provider.InstanceName(testUID)
	testIP        = "127.0.0.7"
	// testProviderID is status.providerID of testInstance made by the local provider.
	testProviderID = "local://" + testInstance
)

var (
	testKey   = cache.NewObjectName(testNamespace, "p1")
	testNow   = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	errBoom   = errors.New("boom")
	cloudData = []byte("#cloud-config\nruncmd: [echo hi]\n")
)

// proxyOption shapes a test Proxy.
type proxyOption func(*crawlv1alpha1.Proxy)

func newProxy(opts ...proxyOption) *crawlv1alpha1.Proxy {
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "p1", UID: testUID, Generation: 1, ResourceVersion: "10"},
		Spec: crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderLocal, MaxLeases: 1,
			HealthCheck: crawlv1alpha1.HealthCheck{URL: "http://127.0.0.1:1/generate_204", ExpectedStatus: 204},
		},
	}
	for _, opt := range opts {
		opt(p)
	}
	return p
}

func withFinalizer(p *crawlv1alpha1.Proxy) {
	p.Finalizers = append(p.Finalizers, crawlv1alpha1.Finalizer)
}

// withHash records the hash of the spec as it is when this option runs,
// with the digest of the generated credentials the fixture seeds when the
// Proxy has none of its own.
func withHash(p *crawlv1alpha1.Proxy) {
	digest := ""
	if proxyaccess.UsesGeneratedCredentials(p) {
		digest = generatedDigest
	}
	withHashOf(specHash(nil, p.Spec, nil, digest))(p)
}

// generatedSecret is the credentials Secret the controller would have
// generated for newProxy(), with fixed values.
func generatedSecret() *corev1.Secret {
	p := newProxy()
	s := credentialsSecret("generated-password")
	s.Name = proxyaccess.GeneratedCredentialsSecret(p)
	s.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(p, crawlv1alpha1.SchemeGroupVersion.WithKind("Proxy"))}
	return s
}

// generatedDigest is credentialsDigest for generatedSecret.
var generatedDigest = func() string {
	c := &Controller{secrets: corelisters.NewSecretLister(indexerWith(generatedSecret()))}
	d, err := c.credentialsDigest(newProxy())
	if err != nil {
		panic(err)
	}
	return d
}()

func withHashOf(h string) proxyOption {
	return func(p *crawlv1alpha1.Proxy) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[crawlv1alpha1.SpecHashAnnotation] = h
	}
}

func withInstance(p *crawlv1alpha1.Proxy) { p.Status.ProviderID = testProviderID }

func withRunningStatus(p *crawlv1alpha1.Proxy) {
	p.Status.ProviderID, p.Status.IP, p.Status.Port = testProviderID, testIP, 3128
	withCondition(crawlv1alpha1.ConditionProvisioned, metav1.ConditionTrue, ReasonCreated,
		fmt.Sprintf("instance %s is running at %s:3128", testProviderID, testIP))(p)
}

func withAuth(p *crawlv1alpha1.Proxy) {
	p.Spec.Auth = &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: "creds"}}
}

// markedForProxies is the label that lets Proxies use a credentials Secret.
var markedForProxies = map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}

func credentialsSecret(password string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "creds", Labels: markedForProxies},
		Data:       map[string][]byte{"username": []byte("crawler"), "password": []byte(password)},
	}
}

// unmarked is s without the label that lets Proxies use it.
func unmarked(s *corev1.Secret) *corev1.Secret {
	s.Labels = nil
	return s
}

// digestOf is credentialsDigest for credentialsSecret(password).
func digestOf(password string) string {
	c := &Controller{secrets: corelisters.NewSecretLister(indexerWith(credentialsSecret(password)))}
	d, err := c.credentialsDigest(newProxy(withAuth))
	if err != nil {
		panic(err)
	}
	return d
}

func indexerWith(objs ...runtime.Object) cache.Indexer {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			panic(err)
		}
	}
	return idx
}

func withCondition(condType string, status metav1.ConditionStatus, reason, message string) proxyOption {
	return func(p *crawlv1alpha1.Proxy) {
		meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{
			Type: condType, Status: status, Reason: reason, Message: message,
			ObservedGeneration: p.Generation, LastTransitionTime: metav1.NewTime(testNow.Add(-time.Hour)),
		})
	}
}

func withGeneration(g int64) proxyOption { return func(p *crawlv1alpha1.Proxy) { p.Generation = g } }

func withProvider(name crawlv1alpha1.ProviderName) proxyOption {
	return func(p *crawlv1alpha1.Proxy) { p.Spec.Provider = name }
}

func withCloudInitSecret(name string) proxyOption {
	return func(p *crawlv1alpha1.Proxy) {
		p.Spec.CloudInit = &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: name, Key: "user-data"}}
	}
}

func withExternal(p *crawlv1alpha1.Proxy) {
	p.Spec.Mode, p.Spec.Provider = crawlv1alpha1.ModeExternal, ""
	p.Spec.Endpoint = &crawlv1alpha1.Endpoint{Host: "127.0.0.9", Port: 3128, Scheme: crawlv1alpha1.SchemeHTTP}
}

func withDeleting(p *crawlv1alpha1.Proxy) {
	t := metav1.NewTime(testNow)
	p.DeletionTimestamp = &t
}

// withObservedStatus sets observedGeneration and phase as the controller
// would have written them, so a steady object needs no status write.
func withObservedStatus(p *crawlv1alpha1.Proxy) {
	p.Status.ObservedGeneration = p.Generation
	p.Status.Phase = computePhase(p)
}

func cloudInitSecret(key string, data []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "user-data"},
		Data:       map[string][]byte{key: data},
	}
}

// fakeHealth is a HealthSource with fixed verdicts.
type fakeHealth map[cache.ObjectName]health.Verdict

func (f fakeHealth) Verdict(key cache.ObjectName) (health.Verdict, bool) {
	v, ok := f[key]
	return v, ok
}

func healthy(addr string) fakeHealth {
	return fakeHealth{testKey: {Address: addr, Healthy: true, Message: "204 in 12ms", Latency: 12 * time.Millisecond, CheckedAt: testNow}}
}

func unhealthy(addr string) fakeHealth {
	return fakeHealth{testKey: {Address: addr, Healthy: false, Message: "connection refused", Latency: 2 * time.Millisecond, CheckedAt: testNow}}
}

// runningInstance is the fake's instance behind withRunningStatus.
func runningInstance(fp *fake.Provider) {
	fp.Inject(provider.Instance{ID: testInstance, State: provider.StateRunning, IP: testIP, Port: 3128})
}

// statusView is the part of the status a row asserts.
type statusView struct {
	Phase      crawlv1alpha1.ProxyPhase
	ProviderID string
	IP         string
	Conditions []string // "Type=Status/Reason"
	Latency    int64
	ExitRanges []string
}

func viewOf(s crawlv1alpha1.ProxyStatus) statusView {
	v := statusView{Phase: s.Phase, ProviderID: s.ProviderID, IP: s.IP, Latency: s.LatencyMillis, ExitRanges: s.ExitRanges}
	for _, c := range s.Conditions {
		v.Conditions = append(v.Conditions, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return v
}

func TestSync(t *testing.T) {
	tests := map[string]struct {
		proxy         *crawlv1alpha1.Proxy // nil: not in the cache
		secrets       []*corev1.Secret
		setupProvider func(*fake.Provider)
		health        HealthSource

		wantRequeue  time.Duration
		wantErr      bool
		wantActions  []string // API writes: "verb resource[/subresource]"
		wantCalls    []fake.Call
		wantStatus   *statusView // nil: no status write
		wantEvents   []string    // "Type Reason"
		wantHashSet  bool        // the spec-hash annotation was written
		wantHash     string      // its value ("": not checked)
		wantFinal    *bool       // finalizer present after the sync (nil: not checked)
		wantCreateIn string      // CloudInit the provider received
		// noGeneratedSecret: do not seed generatedSecret for a Managed
		// Proxy without spec.auth (seeded by default: most rows are about
		// other things).
		noGeneratedSecret bool
	}{
		"gone from the cache: nothing to do": {
			proxy:       nil,
			wantRequeue: done,
		},
		"new managed proxy gets the finalizer first": {
			proxy:       newProxy(),
			wantRequeue: done,
			wantActions: []string{"update proxies", "update proxies/status"},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhasePending},
			wantFinal:   ptr.To(true),
		},
		"permanent error at this generation latches: no calls, no writes": {
			proxy: newProxy(withFinalizer, withCondition(crawlv1alpha1.ConditionProvisioned, metav1.ConditionFalse, ReasonPermanentError, "create: invalid"),
				withObservedStatus),
			wantRequeue: done,
		},
		"permanent error from an older generation is retried": {
			proxy: newProxy(withFinalizer, withCondition(crawlv1alpha1.ConditionProvisioned, metav1.ConditionFalse, ReasonPermanentError, "create: invalid"),
				withGeneration(2), withObservedStatus),
			setupProvider: func(fp *fake.Provider) {},
			wantRequeue:   DriftPoll,
			wantActions:   []string{"update proxies", "update proxies/status"},
			wantCalls:     []fake.Call{{Op: fake.OpCreate, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseProvisioning, ProviderID: testProviderID, IP: "127.0.0.2", Conditions: []string{"Provisioned=True/Created"}},
			wantEvents:    []string{"Normal Created"},
			wantHashSet:   true,
		},
		"create returns an instance an earlier request built from an older spec: its hash is recorded, so the next pass replaces it": {
			proxy: newProxy(withFinalizer),
			setupProvider: func(fp *fake.Provider) {
				fp.Inject(provider.Instance{ID: testInstance, State: provider.StateRunning, IP: testIP, Port: 3128, SpecHash: "built-from-an-older-spec"})
			},
			wantRequeue: DriftPoll,
			wantActions: []string{"update proxies", "update proxies/status"},
			wantCalls:   []fake.Call{{Op: fake.OpCreate, ID: testInstance}},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhaseProvisioning, ProviderID: testProviderID, IP: testIP, Conditions: []string{"Provisioned=True/Created"}},
			wantEvents:  []string{"Normal Created"},
			wantHashSet: true,
			wantHash:    "built-from-an-older-spec",
		},
		"an instance with exit ranges: status.exitRanges copies them": {
			proxy: newProxy(withFinalizer),
			setupProvider: func(fp *fake.Provider) {
				fp.Inject(provider.Instance{ID: testInstance, State: provider.StateRunning, IP: testIP, Port: 3128, ExitRanges: []string{"fd00:5e55:1::/64"}})
			},
			wantRequeue: DriftPoll,
			wantActions: []string{"update proxies", "update proxies/status"},
			wantCalls:   []fake.Call{{Op: fake.OpCreate, ID: testInstance}},
			wantStatus: &statusView{Phase: crawlv1alpha1.PhaseProvisioning, ProviderID: testProviderID, IP: testIP, Conditions: []string{"Provisioned=True/Created"},
				ExitRanges: []string{"fd00:5e55:1::/64"}},
			wantEvents:  []string{"Normal Created"},
			wantHashSet: true,
		},
		"provider not enabled: Failed without provider calls": {
			proxy:       newProxy(withFinalizer, withProvider(crawlv1alpha1.ProviderGCE)),
			wantRequeue: done,
			wantActions: []string{"update proxies/status"},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhaseFailed, Conditions: []string{"Provisioned=False/ProviderNotEnabled"}},
		},
		"cloud-init Secret missing: CloudInitError and backoff": {
			proxy:       newProxy(withFinalizer, withCloudInitSecret("user-data")),
			wantErr:     true,
			wantActions: []string{"update proxies/status"},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhaseProvisioning, Conditions: []string{"Provisioned=False/CloudInitError"}},
		},
		"cloud-init Secret without the key: CloudInitError and backoff": {
			proxy:       newProxy(withFinalizer, withCloudInitSecret("user-data")),
			secrets:     []*corev1.Secret{cloudInitSecret("other-key", cloudData)},
			wantErr:     true,
			wantActions: []string{"update proxies/status"},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhaseProvisioning, Conditions: []string{"Provisioned=False/CloudInitError"}},
		},
		"no instance: create with name, tags and cloud-init from the Secret": {
			proxy:         newProxy(withFinalizer, withCloudInitSecret("user-data")),
			secrets:       []*corev1.Secret{cloudInitSecret("user-data", cloudData)},
			setupProvider: func(fp *fake.Provider) {},
			wantRequeue:   DriftPoll,
			wantActions:   []string{"update proxies", "update proxies/status"},
			wantCalls:     []fake.Call{{Op: fake.OpCreate, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseProvisioning, ProviderID: testProviderID, IP: "127.0.0.2", Conditions: []string{"Provisioned=True/Created"}},
			wantEvents:    []string{"Normal Created"},
			wantHashSet:   true,
			wantCreateIn:  string(cloudData),
		},
		"create quota exceeded: condition and fixed retry": {
			proxy:         newProxy(withFinalizer),
			setupProvider: func(fp *fake.Provider) { fp.FailNext(fake.OpCreate, provider.Quota(errBoom), 1) },
			wantRequeue:   QuotaRetry,
			wantActions:   []string{"update proxies/status"},
			wantCalls:     []fake.Call{{Op: fake.OpCreate, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseProvisioning, Conditions: []string{"Provisioned=False/QuotaExceeded"}},
			wantEvents:    []string{"Warning QuotaExceeded"},
		},
		"create permanent error: Failed and silent": {
			proxy:         newProxy(withFinalizer),
			setupProvider: func(fp *fake.Provider) { fp.FailNext(fake.OpCreate, provider.Permanent(errBoom), 1) },
			wantRequeue:   done,
			wantActions:   []string{"update proxies/status"},
			wantCalls:     []fake.Call{{Op: fake.OpCreate, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseFailed, Conditions: []string{"Provisioned=False/PermanentError"}},
			wantEvents:    []string{"Warning PermanentError"},
		},
		"create transient error: backoff": {
			proxy:         newProxy(withFinalizer),
			setupProvider: func(fp *fake.Provider) { fp.FailNext(fake.OpCreate, provider.Transient(errBoom), 1) },
			wantErr:       true,
			wantActions:   []string{"update proxies/status"},
			wantCalls:     []fake.Call{{Op: fake.OpCreate, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhasePending},
			wantEvents:    []string{"Warning ProviderError"},
		},
		"instance without a recorded hash is adopted": {
			proxy:         newProxy(withFinalizer, withRunningStatus, withObservedStatus),
			setupProvider: runningInstance,
			wantRequeue:   done,
			wantActions:   []string{"update proxies"},
			wantHashSet:   true,
		},
		"spec changed, instance exists: delete it and replace": {
			proxy:         newProxy(withFinalizer, withHashOf("0000000000000000"), withRunningStatus, withObservedStatus),
			setupProvider: runningInstance,
			wantRequeue:   DeletionPoll,
			wantActions:   []string{"update proxies/status"},
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}, {Op: fake.OpDelete, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseProvisioning, ProviderID: testProviderID, IP: testIP, Conditions: []string{"Provisioned=False/Replacing"}},
			wantEvents:    []string{"Normal Replacing"},
		},
		"replacing, old instance stopping: no second delete": {
			proxy: newProxy(withFinalizer, withHashOf("0000000000000000"), withInstance,
				withCondition(crawlv1alpha1.ConditionProvisioned, metav1.ConditionFalse, ReasonReplacing, "replacing instance "+testProviderID+": the spec or cloud-init changed"), withObservedStatus),
			setupProvider: func(fp *fake.Provider) {
				fp.Inject(provider.Instance{ID: testInstance, State: provider.StateStopped, Message: "deleting"})
			},
			wantRequeue: DeletionPoll,
			wantCalls:   []fake.Call{{Op: fake.OpGet, ID: testInstance}},
		},
		"replacing, old instance gone: record the new hash and create next": {
			proxy: newProxy(withFinalizer, withHashOf("0000000000000000"), withInstance,
				withCondition(crawlv1alpha1.ConditionProvisioned, metav1.ConditionFalse, ReasonReplacing, "replacing"), withObservedStatus),
			setupProvider: func(fp *fake.Provider) {},
			wantRequeue:   requeueNow,
			wantActions:   []string{"update proxies", "update proxies/status"},
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseProvisioning, Conditions: []string{"Provisioned=False/Provisioning"}},
			wantHashSet:   true,
		},
		"instance provisioning: poll": {
			proxy: newProxy(withFinalizer, withHash, withInstance),
			setupProvider: func(fp *fake.Provider) {
				fp.Inject(provider.Instance{ID: testInstance, State: provider.StateProvisioning})
			},
			wantRequeue: ProvisioningPoll,
			wantActions: []string{"update proxies/status"},
			wantCalls:   []fake.Call{{Op: fake.OpGet, ID: testInstance}},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhaseProvisioning, ProviderID: testProviderID, Conditions: []string{"Provisioned=False/Provisioning"}},
		},
		"instance running, not yet probed: provisioned, drift poll": {
			proxy:         newProxy(withFinalizer, withHash, withInstance),
			setupProvider: runningInstance,
			wantRequeue:   DriftPoll,
			wantActions:   []string{"update proxies/status"},
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseProvisioning, ProviderID: testProviderID, IP: testIP, Conditions: []string{"Provisioned=True/Created"}},
		},
		"instance running and healthy: Ready with latency": {
			proxy:         newProxy(withFinalizer, withHash, withRunningStatus, withObservedStatus),
			setupProvider: runningInstance,
			health:        healthy(testIP + ":3128"),
			wantRequeue:   DriftPoll,
			wantActions:   []string{"update proxies/status"},
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseReady, ProviderID: testProviderID, IP: testIP, Latency: 12, Conditions: []string{"Provisioned=True/Created", "Healthy=True/ProbeSucceeded"}},
			wantEvents:    []string{"Normal Healthy"},
		},
		"instance running and failing probes: Unhealthy": {
			proxy:         newProxy(withFinalizer, withHash, withRunningStatus, withObservedStatus),
			setupProvider: runningInstance,
			health:        unhealthy(testIP + ":3128"),
			wantRequeue:   DriftPoll,
			wantActions:   []string{"update proxies/status"},
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseUnhealthy, ProviderID: testProviderID, IP: testIP, Latency: 2, Conditions: []string{"Provisioned=True/Created", "Healthy=False/ProbeFailed"}},
			wantEvents:    []string{"Warning Unhealthy"},
		},
		"a verdict about another address is ignored": {
			proxy:         newProxy(withFinalizer, withHash, withRunningStatus, withObservedStatus),
			setupProvider: runningInstance,
			health:        healthy("127.0.0.99:3128"),
			wantRequeue:   DriftPoll,
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}},
		},
		"steady healthy proxy: zero writes": {
			proxy: newProxy(withFinalizer, withHash, withRunningStatus,
				withCondition(crawlv1alpha1.ConditionHealthy, metav1.ConditionTrue, ReasonProbeSucceeded, "204 in 12ms"),
				func(p *crawlv1alpha1.Proxy) {
					p.Status.LatencyMillis = 12
					p.Status.LastHealthCheckTime = ptr.To(metav1.NewTime(testNow))
				}, withObservedStatus),
			setupProvider: runningInstance,
			health:        healthy(testIP + ":3128"),
			wantRequeue:   DriftPoll,
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}},
		},
		"instance stopped: deleted as cattle, then replaced": {
			proxy: newProxy(withFinalizer, withHash, withRunningStatus,
				withCondition(crawlv1alpha1.ConditionHealthy, metav1.ConditionTrue, ReasonProbeSucceeded, "ok"), withObservedStatus),
			setupProvider: func(fp *fake.Provider) {
				fp.Inject(provider.Instance{ID: testInstance, State: provider.StateStopped, IP: testIP, Port: 3128, Message: "preempted"})
			},
			wantRequeue: DeletionPoll,
			wantActions: []string{"update proxies/status"},
			wantCalls:   []fake.Call{{Op: fake.OpGet, ID: testInstance}, {Op: fake.OpDelete, ID: testInstance}},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhaseProvisioning, ProviderID: testProviderID, IP: testIP, Conditions: []string{"Provisioned=False/Replacing"}},
			wantEvents:  []string{"Warning InstanceStopped"},
		},
		"instance vanished: forget it and create at once": {
			proxy:         newProxy(withFinalizer, withHash, withRunningStatus, withObservedStatus),
			setupProvider: func(fp *fake.Provider) {},
			wantRequeue:   requeueNow,
			wantActions:   []string{"update proxies/status"},
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseProvisioning, Conditions: []string{"Provisioned=False/Provisioning"}},
			wantEvents:    []string{"Warning InstanceVanished"},
		},
		"get fails transiently: backoff, status untouched": {
			proxy:         newProxy(withFinalizer, withHash, withRunningStatus, withObservedStatus),
			setupProvider: func(fp *fake.Provider) { runningInstance(fp); fp.FailNext(fake.OpGet, errBoom, 1) },
			wantErr:       true,
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}},
			wantEvents:    []string{"Warning ProviderError"},
		},
		"an instance recorded before IDs named their provider is still found": {
			proxy: newProxy(withFinalizer, withHash, withRunningStatus, func(p *crawlv1alpha1.Proxy) {
				p.Status.ProviderID = testInstance
			}, withObservedStatus),
			setupProvider: runningInstance,
			wantRequeue:   DriftPoll,
			wantActions:   []string{"update proxies/status"}, // the condition message names the ID
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseProvisioning, ProviderID: testInstance, IP: testIP, Conditions: []string{"Provisioned=True/Created"}},
		},
		"spec.provider changed: the old instance is deleted through its own provider": {
			proxy:         newProxy(withFinalizer, withHash, withRunningStatus, withProvider(crawlv1alpha1.ProviderKubernetes), withObservedStatus),
			setupProvider: runningInstance, // in the local fake; the kubernetes fake sees no call
			wantRequeue:   DeletionPoll,
			wantActions:   []string{"update proxies/status"},
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}, {Op: fake.OpDelete, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseProvisioning, ProviderID: testProviderID, IP: testIP, Conditions: []string{"Provisioned=False/Replacing"}},
			wantEvents:    []string{"Normal Replacing"},
		},
		"managed without spec.auth: credentials are generated before any instance, then it waits for the Secret's event": {
			proxy:             newProxy(withFinalizer),
			noGeneratedSecret: true,
			setupProvider:     func(fp *fake.Provider) {},
			wantRequeue:       ProvisioningPoll,
			wantActions:       []string{"update proxies/status", "create secrets"},
			wantStatus:        &statusView{Phase: crawlv1alpha1.PhaseProvisioning, Conditions: []string{"Provisioned=False/Provisioning"}},
		},
		"managed without spec.auth, generated Secret in the cache: the instance is created": {
			proxy:         newProxy(withFinalizer),
			setupProvider: func(fp *fake.Provider) {},
			wantRequeue:   DriftPoll,
			wantActions:   []string{"update proxies", "update proxies/status"},
			wantCalls:     []fake.Call{{Op: fake.OpCreate, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseProvisioning, ProviderID: testProviderID, IP: "127.0.0.2", Conditions: []string{"Provisioned=True/Created"}},
			wantEvents:    []string{"Normal Created"},
			wantHashSet:   true,
			wantHash:      specHash(nil, newProxy().Spec, nil, generatedDigest),
		},
		"a Secret of the generated name that the Proxy does not control: CredentialsError, never overwritten": {
			proxy:             newProxy(withFinalizer),
			noGeneratedSecret: true,
			secrets: []*corev1.Secret{func() *corev1.Secret {
				s := generatedSecret()
				s.OwnerReferences = nil
				return s
			}()},
			wantErr:     true,
			wantActions: []string{"update proxies/status"},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhaseProvisioning, Conditions: []string{"Provisioned=False/CredentialsError"}},
			wantEvents:  []string{"Warning CredentialsError"},
		},
		"upgrade: an open instance from before generated credentials is replaced": {
			proxy: newProxy(withFinalizer, func(p *crawlv1alpha1.Proxy) {
				withHashOf(specHash(nil, p.Spec, nil, ""))(p)
			}, withRunningStatus, withObservedStatus),
			setupProvider: runningInstance,
			wantRequeue:   DeletionPoll,
			wantActions:   []string{"update proxies/status"},
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}, {Op: fake.OpDelete, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseProvisioning, ProviderID: testProviderID, IP: testIP, Conditions: []string{"Provisioned=False/Replacing"}},
			wantEvents:    []string{"Normal Replacing"},
		},
		"credentials Secret missing: CredentialsError and backoff": {
			proxy:       newProxy(withFinalizer, withAuth),
			wantErr:     true,
			wantActions: []string{"update proxies/status"},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhaseProvisioning, Conditions: []string{"Provisioned=False/CredentialsError"}},
			wantEvents:  []string{"Warning CredentialsError"},
		},
		"spec.auth names an unmarked Secret: no instance, CredentialsError, an event": {
			proxy:       newProxy(withFinalizer, withAuth),
			secrets:     []*corev1.Secret{unmarked(credentialsSecret("s3cret"))},
			wantErr:     true,
			wantActions: []string{"update proxies/status"},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhaseProvisioning, Conditions: []string{"Provisioned=False/CredentialsError"}},
			wantEvents:  []string{"Warning CredentialsError"},
		},
		"upgrade: a running instance whose spec.auth Secret is unmarked is not Ready, and is kept": {
			proxy: newProxy(withFinalizer, withAuth, func(p *crawlv1alpha1.Proxy) {
				withHashOf(specHash(nil, p.Spec, nil, digestOf("s3cret")))(p)
			}, withRunningStatus, withCondition(crawlv1alpha1.ConditionHealthy, metav1.ConditionTrue, ReasonProbeSucceeded, "target answered 204"), withObservedStatus),
			secrets:       []*corev1.Secret{unmarked(credentialsSecret("s3cret"))},
			setupProvider: runningInstance,
			wantErr:       true,
			wantActions:   []string{"update proxies/status"},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseProvisioning, ProviderID: testProviderID, IP: testIP, Conditions: []string{"Provisioned=False/CredentialsError", "Healthy=True/ProbeSucceeded"}},
			wantEvents:    []string{"Warning CredentialsError"},
		},
		"upgrade: a generated Secret from before the mark is marked; the status waits for the cache": {
			proxy: newProxy(withFinalizer, withHash, withRunningStatus,
				withCondition(crawlv1alpha1.ConditionHealthy, metav1.ConditionTrue, ReasonProbeSucceeded, "target answered 204"), withObservedStatus),
			noGeneratedSecret: true,
			secrets:           []*corev1.Secret{unmarked(generatedSecret())},
			setupProvider:     runningInstance,
			wantRequeue:       ProvisioningPoll,
			wantActions:       []string{"update secrets"},
		},
		"credentials unchanged: no replace": {
			proxy: newProxy(withFinalizer, withAuth, func(p *crawlv1alpha1.Proxy) {
				withHashOf(specHash(nil, p.Spec, nil, digestOf("old-password")))(p)
			}, withRunningStatus, withObservedStatus),
			secrets:       []*corev1.Secret{credentialsSecret("old-password")},
			setupProvider: runningInstance,
			wantRequeue:   DriftPoll,
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}},
		},
		"credentials rotated: the instance is replaced": {
			proxy: newProxy(withFinalizer, withAuth, func(p *crawlv1alpha1.Proxy) {
				withHashOf(specHash(nil, p.Spec, nil, digestOf("old-password")))(p)
			}, withRunningStatus, withObservedStatus),
			secrets:       []*corev1.Secret{credentialsSecret("new-password")},
			setupProvider: runningInstance,
			wantRequeue:   DeletionPoll,
			wantActions:   []string{"update proxies/status"},
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}, {Op: fake.OpDelete, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseProvisioning, ProviderID: testProviderID, IP: testIP, Conditions: []string{"Provisioned=False/Replacing"}},
			wantEvents:    []string{"Normal Replacing"},
		},
		"external: endpoint recorded, no provider, no finalizer": {
			proxy:       newProxy(withExternal),
			wantRequeue: done,
			wantActions: []string{"update proxies/status"},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhasePending, IP: "127.0.0.9", Conditions: []string{"Provisioned=True/ExternalEndpoint", "Authenticated=False/NoCredentials"}},
			wantFinal:   ptr.To(false),
		},
		"external with spec.exitRanges: status.exitRanges copies them": {
			proxy: newProxy(withExternal, func(p *crawlv1alpha1.Proxy) {
				p.Spec.ExitRanges = []crawlv1alpha1.CIDR{"2001:db8:7::/48", "198.18.5.0/29"}
			}),
			wantRequeue: done,
			wantActions: []string{"update proxies/status"},
			wantStatus: &statusView{Phase: crawlv1alpha1.PhasePending, IP: "127.0.0.9", Conditions: []string{"Provisioned=True/ExternalEndpoint", "Authenticated=False/NoCredentials"},
				ExitRanges: []string{"2001:db8:7::/48", "198.18.5.0/29"}},
			wantFinal: ptr.To(false),
		},
		"external with spec.auth: no Authenticated condition, no Secret generated": {
			proxy: newProxy(withExternal, withAuth,
				withCondition(ConditionAuthenticated, metav1.ConditionFalse, ReasonNoCredentials, messageNoCredentials)),
			secrets:     []*corev1.Secret{credentialsSecret("s3cret")},
			wantRequeue: done,
			wantActions: []string{"update proxies/status"},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhasePending, IP: "127.0.0.9", Conditions: []string{"Provisioned=True/ExternalEndpoint"}},
		},
		// docs/decisions/0230-credentials-secrets-opt-in-by-label.md: the endpoint is the creator's choice,
		// so an unmarked Secret leaves no address to probe or lease.
		"external with spec.auth naming an unmarked Secret: no address, CredentialsError, an event": {
			proxy: newProxy(withExternal, withAuth, func(p *crawlv1alpha1.Proxy) {
				p.Status.IP, p.Status.Port = "127.0.0.9", 3128
			}, withCondition(crawlv1alpha1.ConditionProvisioned, metav1.ConditionTrue, ReasonExternalEndpoint, "external proxy at 127.0.0.9:3128"),
				withCondition(crawlv1alpha1.ConditionHealthy, metav1.ConditionTrue, ReasonProbeSucceeded, "target answered 204"), withObservedStatus),
			secrets:     []*corev1.Secret{unmarked(credentialsSecret("s3cret"))},
			health:      healthy("127.0.0.9:3128"),
			wantErr:     true,
			wantActions: []string{"update proxies/status"},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhaseProvisioning, Conditions: []string{"Provisioned=False/CredentialsError"}},
			wantEvents:  []string{"Warning CredentialsError"},
		},
		"external and healthy: Ready": {
			proxy:       newProxy(withExternal),
			health:      healthy("127.0.0.9:3128"),
			wantRequeue: done,
			wantActions: []string{"update proxies/status"},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhaseReady, IP: "127.0.0.9", Latency: 12, Conditions: []string{"Provisioned=True/ExternalEndpoint", "Authenticated=False/NoCredentials", "Healthy=True/ProbeSucceeded"}},
			wantEvents:  []string{"Normal Healthy"},
		},
		"external, steady: zero writes": {
			proxy: newProxy(withExternal, func(p *crawlv1alpha1.Proxy) {
				p.Status.IP, p.Status.Port = "127.0.0.9", 3128
			}, withCondition(crawlv1alpha1.ConditionProvisioned, metav1.ConditionTrue, ReasonExternalEndpoint, "external proxy at 127.0.0.9:3128"),
				withCondition(ConditionAuthenticated, metav1.ConditionFalse, ReasonNoCredentials, messageNoCredentials), withObservedStatus),
			wantRequeue: done,
		},
		"deleting without our finalizer: nothing to do": {
			proxy:       newProxy(withDeleting, func(p *crawlv1alpha1.Proxy) { p.Finalizers = []string{"someone.else/hold"} }, withObservedStatus),
			wantRequeue: done,
		},
		"deleting, no instance recorded and none found: finalizer removed": {
			proxy:         newProxy(withFinalizer, withDeleting, withObservedStatus),
			setupProvider: func(fp *fake.Provider) {},
			wantRequeue:   done,
			wantActions:   []string{"update proxies"},
			wantCalls:     []fake.Call{{Op: fake.OpList, ID: crawlv1alpha1.TagProxyUID + "=" + testUID}},
			wantFinal:     ptr.To(false),
		},
		"deleting, an instance exists that status does not record: found by tag, deleted, polled": {
			proxy: newProxy(withFinalizer, withDeleting, withObservedStatus),
			setupProvider: func(fp *fake.Provider) {
				fp.Inject(provider.Instance{ID: testInstance, State: provider.StateRunning, IP: testIP, Port: 3128,
					Tags: map[string]string{crawlv1alpha1.TagProxyUID: testUID}})
			},
			wantRequeue: DeletionPoll,
			wantActions: []string{"update proxies/status"},
			wantCalls: []fake.Call{
				{Op: fake.OpList, ID: crawlv1alpha1.TagProxyUID + "=" + testUID},
				{Op: fake.OpGet, ID: testInstance},
				{Op: fake.OpDelete, ID: testInstance},
			},
			wantStatus: &statusView{Phase: crawlv1alpha1.PhaseDeleting, ProviderID: testProviderID, Conditions: []string{"Provisioned=False/Deleting"}},
			wantFinal:  ptr.To(true),
		},
		"deleting, no instance recorded, the list fails: finalizer kept, retried": {
			proxy: newProxy(withFinalizer, withDeleting, withObservedStatus),
			setupProvider: func(fp *fake.Provider) {
				fp.FailNext(fake.OpList, provider.Transient(errBoom), 1)
			},
			wantErr:    true,
			wantCalls:  []fake.Call{{Op: fake.OpList, ID: crawlv1alpha1.TagProxyUID + "=" + testUID}},
			wantEvents: []string{"Warning ProviderError"},
			wantFinal:  ptr.To(true),
		},
		"deleting, a permanent error from delete: not latched, retried with backoff": {
			proxy: newProxy(withFinalizer, withHash, withRunningStatus, withDeleting, withObservedStatus),
			setupProvider: func(fp *fake.Provider) {
				runningInstance(fp)
				fp.FailNext(fake.OpDelete, provider.Permanent(errBoom), 1)
			},
			wantErr:     true,
			wantActions: []string{"update proxies/status"},
			wantCalls:   []fake.Call{{Op: fake.OpGet, ID: testInstance}, {Op: fake.OpDelete, ID: testInstance}},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhaseDeleting, ProviderID: testProviderID, IP: testIP, Conditions: []string{"Provisioned=False/PermanentError"}},
			wantEvents:  []string{"Warning PermanentError"},
			wantFinal:   ptr.To(true),
		},
		"deleting an External proxy: no provider call": {
			proxy:       newProxy(withExternal, withFinalizer, withDeleting, withObservedStatus),
			wantRequeue: done,
			wantActions: []string{"update proxies"},
			wantFinal:   ptr.To(false),
		},
		"deleting, instance exists: delete it and poll": {
			proxy:         newProxy(withFinalizer, withHash, withRunningStatus, withDeleting, withObservedStatus),
			setupProvider: runningInstance,
			wantRequeue:   DeletionPoll,
			wantActions:   []string{"update proxies/status"},
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}, {Op: fake.OpDelete, ID: testInstance}},
			wantStatus:    &statusView{Phase: crawlv1alpha1.PhaseDeleting, ProviderID: testProviderID, IP: testIP, Conditions: []string{"Provisioned=False/Deleting"}},
			wantFinal:     ptr.To(true),
		},
		"deleting, instance gone after our delete: finalizer removed": {
			proxy: newProxy(withFinalizer, withHash, withRunningStatus, withDeleting,
				withCondition(crawlv1alpha1.ConditionProvisioned, metav1.ConditionFalse, ReasonDeleting, "deleting instance"), withObservedStatus),
			setupProvider: func(fp *fake.Provider) {},
			wantRequeue:   done,
			wantActions:   []string{"update proxies"},
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}},
			wantEvents:    []string{"Normal Deleted"},
			wantFinal:     ptr.To(false),
		},
		"deleting, instance gone after our delete while replacing: finalizer removed": {
			proxy: newProxy(withFinalizer, withHash, withRunningStatus, withDeleting,
				withCondition(crawlv1alpha1.ConditionProvisioned, metav1.ConditionFalse, ReasonReplacing, "replacing instance"), withObservedStatus),
			setupProvider: func(fp *fake.Provider) {},
			wantRequeue:   done,
			wantActions:   []string{"update proxies"},
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}},
			wantEvents:    []string{"Normal Deleted"},
			wantFinal:     ptr.To(false),
		},
		"deleting, instance gone by itself: delete takes what it left, then finalizer removed": {
			proxy:         newProxy(withFinalizer, withHash, withRunningStatus, withDeleting, withObservedStatus),
			setupProvider: func(fp *fake.Provider) {},
			wantRequeue:   done,
			wantActions:   []string{"update proxies"},
			wantCalls:     []fake.Call{{Op: fake.OpGet, ID: testInstance}, {Op: fake.OpDelete, ID: testInstance}},
			wantEvents:    []string{"Normal Deleted"},
			wantFinal:     ptr.To(false),
		},
		"deleting, instance gone but our delete failed (its Secret left): delete retried, finalizer kept": {
			proxy: newProxy(withFinalizer, withHash, withRunningStatus, withDeleting,
				withCondition(crawlv1alpha1.ConditionProvisioned, metav1.ConditionFalse, ReasonPermanentError, "delete: forbidden"), withObservedStatus),
			setupProvider: func(fp *fake.Provider) {
				fp.FailNext(fake.OpDelete, provider.Permanent(errBoom), 1)
			},
			wantErr:     true,
			wantActions: []string{"update proxies/status"},
			wantCalls:   []fake.Call{{Op: fake.OpGet, ID: testInstance}, {Op: fake.OpDelete, ID: testInstance}},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhaseDeleting, ProviderID: testProviderID, IP: testIP, Conditions: []string{"Provisioned=False/PermanentError"}},
			// The first failure's event told it; the same reason again is not news.
			wantFinal: ptr.To(true),
		},
		"deleting with the provider not enabled: finalizer kept, reason given": {
			proxy: newProxy(withFinalizer, withProvider(crawlv1alpha1.ProviderGCE), withRunningStatus, func(p *crawlv1alpha1.Proxy) {
				p.Status.ProviderID = "gce://crawl/europe-west1-b/" + testInstance
			}, withDeleting, withObservedStatus),
			wantRequeue: done,
			wantActions: []string{"update proxies/status"},
			wantStatus:  &statusView{Phase: crawlv1alpha1.PhaseDeleting, ProviderID: "gce://crawl/europe-west1-b/" + testInstance, IP: testIP, Conditions: []string{"Provisioned=False/ProviderNotEnabled"}},
			wantFinal:   ptr.To(true),
		},
	}

	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			secrets := tc.secrets
			if tc.proxy != nil && proxyaccess.UsesGeneratedCredentials(tc.proxy) && !tc.noGeneratedSecret {
				secrets = append(slices.Clone(secrets), generatedSecret())
			}
			f := newFixture(t, tc.proxy, secrets, tc.health)
			if tc.setupProvider != nil {
				tc.setupProvider(f.provider)
			}
			f.provider.ResetCalls()

			requeue, err := f.controller.sync(context.Background(), testKey)

			if (err != nil) != tc.wantErr {
				t.Errorf("err = %v, want error: %v", err, tc.wantErr)
			}
			if err == nil && requeue != tc.wantRequeue {
				t.Errorf("requeue = %v, want %v", requeue, tc.wantRequeue)
			}
			// In order: a metadata write (finalizer, spec hash) must land
			// before the status write that relies on it.
			if diff := cmp.Diff(tc.wantActions, f.writes(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("API writes, in order (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCalls, f.provider.Calls(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("provider calls (-want +got):\n%s", diff)
			}
			if calls := f.other.Calls(); len(calls) > 0 {
				t.Errorf("the other provider was called: %v", calls)
			}
			if diff := cmp.Diff(tc.wantEvents, f.events(), cmpopts.EquateEmpty(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if tc.wantStatus != nil {
				written := f.writtenStatus(t)
				if diff := cmp.Diff(*tc.wantStatus, viewOf(written), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("written status (-want +got):\n%s", diff)
				}
				if written.ObservedGeneration != tc.proxy.Generation {
					t.Errorf("observedGeneration = %d, want %d", written.ObservedGeneration, tc.proxy.Generation)
				}
			}
			if tc.proxy == nil {
				return
			}
			stored := f.stored(t)
			if hashSet := stored.Annotations[crawlv1alpha1.SpecHashAnnotation] != tc.proxy.Annotations[crawlv1alpha1.SpecHashAnnotation]; hashSet != tc.wantHashSet {
				t.Errorf("spec-hash annotation written = %v, want %v", hashSet, tc.wantHashSet)
			}
			if got := stored.Annotations[crawlv1alpha1.SpecHashAnnotation]; tc.wantHash != "" && got != tc.wantHash {
				t.Errorf("spec-hash annotation = %q, want %q", got, tc.wantHash)
			}
			if tc.wantFinal != nil && hasFinalizer(stored) != *tc.wantFinal {
				t.Errorf("finalizer present = %v, want %v", hasFinalizer(stored), *tc.wantFinal)
			}
			if tc.wantCreateIn != "" {
				reqs := f.provider.CreateRequests()
				if len(reqs) != 1 {
					t.Fatalf("%d create requests, want 1", len(reqs))
				}
				want := provider.CreateRequest{Name: testInstance, Tags: provider.Tags(tc.proxy), CloudInit: []byte(tc.wantCreateIn)}
				if diff := cmp.Diff(want, reqs[0], cmpopts.IgnoreFields(provider.CreateRequest{}, "Proxy", "SpecHash")); diff != "" {
					t.Errorf("create request (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// fixture is a Controller over fake clients whose caches hold exactly the
// given objects; nothing runs in the background.
type fixture struct {
	controller *Controller
	crawl      *crawlfake.Clientset
	kube       *kubefake.Clientset
	provider   *fake.Provider // "local"
	other      *fake.Provider // "kubernetes"; every row expects it untouched
	recorder   *record.FakeRecorder
}

func newFixture(t *testing.T, proxy *crawlv1alpha1.Proxy, secrets []*corev1.Secret, health HealthSource) *fixture {
	t.Helper()
	var crawlObjects, kubeObjects []runtime.Object
	if proxy != nil {
		crawlObjects = append(crawlObjects, proxy.DeepCopy())
	}
	for _, s := range secrets {
		kubeObjects = append(kubeObjects, s)
	}
	f := &fixture{
		crawl:    crawlfake.NewSimpleClientset(crawlObjects...),
		provider: fake.New(fake.WithClock(clocktesting.NewFakePassiveClock(testNow))),
		other:    fake.New(),
		recorder: record.NewFakeRecorder(100),
	}
	kube := kubefake.NewSimpleClientset(kubeObjects...)
	f.kube = kube
	crawlFactory := crawlinformers.NewSharedInformerFactory(f.crawl, 0)
	kubeFactory := kubeinformers.NewSharedInformerFactory(kube, 0)
	proxyInformer := crawlFactory.Crawl().V1alpha1().Proxies()
	secretInformer := kubeFactory.Core().V1().Secrets()

	c, err := NewController(Config{
		CrawlClient:    f.crawl,
		KubeClient:     kube,
		ProxyInformer:  proxyInformer,
		SecretInformer: secretInformer,
		Providers: map[crawlv1alpha1.ProviderName]provider.Provider{
			crawlv1alpha1.ProviderLocal:      f.provider,
			crawlv1alpha1.ProviderKubernetes: f.other,
		},
		Health:   health,
		Recorder: f.recorder,
		Clock:    clocktesting.NewFakeClock(testNow),
	})
	if err != nil {
		t.Fatal(err)
	}
	if proxy != nil {
		if err := proxyInformer.Informer().GetIndexer().Add(proxy.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range secrets {
		if err := secretInformer.Informer().GetIndexer().Add(s); err != nil {
			t.Fatal(err)
		}
	}
	f.crawl.ClearActions()
	kube.ClearActions()
	f.controller = c
	return f
}

// writes lists the API writes the sync made, as "verb resource[/sub]": the
// crawl group's in order, then core's (Secrets) in order.
func (f *fixture) writes() []string {
	var out []string
	for _, a := range append(f.crawl.Actions(), f.kube.Actions()...) {
		if a.GetVerb() == "get" || a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		r := a.GetResource().Resource
		if a.GetSubresource() != "" {
			r += "/" + a.GetSubresource()
		}
		out = append(out, a.GetVerb()+" "+r)
	}
	return out
}

func (f *fixture) writtenStatus(t *testing.T) crawlv1alpha1.ProxyStatus {
	t.Helper()
	for _, a := range f.crawl.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetSubresource() == "status" {
			return u.GetObject().(*crawlv1alpha1.Proxy).Status
		}
	}
	t.Fatal("no status was written")
	return crawlv1alpha1.ProxyStatus{}
}

func (f *fixture) stored(t *testing.T) *crawlv1alpha1.Proxy {
	t.Helper()
	p, err := f.crawl.CrawlV1alpha1().Proxies(testNamespace).Get(context.Background(), "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// events returns "Type Reason" of every event recorded.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			fields := strings.Fields(e)
			out = append(out, fields[0]+" "+fields[1])
		default:
			return out
		}
	}
}

// TestCredentialsWithColonInUsername: a username with ':' can never log in
// through basic auth, so for every provider the sync stops before Create with
// a CredentialsError condition naming the Secret and the key (and no value).
func TestCredentialsWithColonInUsername(t *testing.T) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "creds", Labels: markedForProxies},
		Data:       map[string][]byte{"username": []byte("crawl:er"), "password": []byte("s3cret")},
	}
	for _, name := range []crawlv1alpha1.ProviderName{crawlv1alpha1.ProviderLocal, crawlv1alpha1.ProviderKubernetes, crawlv1alpha1.ProviderGCE} {
		t.Run(string(name), func(t *testing.T) {
			f := newFixture(t, newProxy(withFinalizer, withAuth, withProvider(name)), []*corev1.Secret{secret}, nil)
			prov := fake.New()
			f.controller.providers[name] = prov

			if _, err := f.controller.sync(context.Background(), testKey); err == nil {
				t.Error("sync returned no error; want one, for a retry with backoff")
			}

			cond := meta.FindStatusCondition(f.writtenStatus(t).Conditions, crawlv1alpha1.ConditionProvisioned)
			want := metav1.Condition{Type: crawlv1alpha1.ConditionProvisioned, Status: metav1.ConditionFalse, Reason: ReasonCredentialsError,
				Message: `spec.auth.secretRef: Secret "creds" key "username" must not contain ':'`}
			if diff := cmp.Diff(&want, cond, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime", "ObservedGeneration")); diff != "" {
				t.Errorf("Provisioned condition (-want +got):\n%s", diff)
			}
			if calls := prov.Calls(); len(calls) > 0 {
				t.Errorf("the %s provider was called: %v", name, calls)
			}
		})
	}
}
