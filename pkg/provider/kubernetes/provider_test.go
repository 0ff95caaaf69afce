package kubernetes_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	podprovider "github.com/proxyfleet/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

// The Provider alone against the real API server: no controller, no
// kubelet (Pods stay Pending and unbound, so their deletion is immediate).

type fixture struct {
	t     *testing.T
	ctx   context.Context
	kube  kubernetes.Interface
	crawl versioned.Interface
	prov  *podprovider.Provider
}

func newFixture(t *testing.T) *fixture {
	env := apiServer.Get(t)
	_, ctx := ktesting.NewTestContext(t)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	return &fixture{t: t, ctx: ctx, kube: kube, crawl: versioned.NewForConfigOrDie(env.Config), prov: podprovider.New(kube, podprovider.Options{})}
}

func (f *fixture) namespace(labels map[string]string) string {
	f.t.Helper()
	ns, err := f.kube.CoreV1().Namespaces().Create(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "podprov-", Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return ns.Name
}

// proxy stores a Proxy (for a real UID); nothing reconciles it.
func (f *fixture) proxy(ns string, p *crawlv1alpha1.Proxy) *crawlv1alpha1.Proxy {
	f.t.Helper()
	created, err := f.crawl.CrawlV1alpha1().Proxies(ns).Create(f.ctx, p, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return created
}

func createRequest(p *crawlv1alpha1.Proxy, cloudInit []byte) provider.CreateRequest {
	return provider.CreateRequest{Name: provider.InstanceName(p.UID), Proxy: p, Tags: provider.Tags(p), CloudInit: cloudInit, SpecHash: "hash"}
}

func TestCreateGetDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ns := f.namespace(nil)
	p := f.proxy(ns, podProxy("p1"))
	name := provider.InstanceName(p.UID)
	secrets := f.kube.CoreV1().Secrets(ns)

	inst, err := f.prov.Create(f.ctx, createRequest(p, []byte("v1")))
	if err != nil {
		t.Fatal(err)
	}
	want := provider.Instance{ID: ns + "/" + name, State: provider.StateProvisioning, Tags: provider.Tags(p), Message: "pod Pending", SpecHash: "hash"}
	if diff := cmp.Diff(want, inst); diff != "" {
		t.Errorf("Create (-want +got):\n%s", diff)
	}

	// A retry after a crash, with a cloud-init that changed meanwhile: the
	// same instance, the Secret brought up to date.
	again, err := f.prov.Create(f.ctx, createRequest(p, []byte("v2")))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, again); diff != "" {
		t.Errorf("second Create (-want +got):\n%s", diff)
	}
	secret, err := secrets.Get(f.ctx, podprovider.CloudInitSecretName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(secret.Data[podprovider.CloudInitKey]) != "v2" {
		t.Error("the cloud-init Secret was not updated by the second Create")
	}
	if got, err := f.prov.Get(f.ctx, inst.ID); err != nil || got.State != provider.StateProvisioning {
		t.Errorf("Get = %+v, %v; want Provisioning", got, err)
	}

	if err := f.prov.Delete(f.ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.prov.Get(f.ctx, inst.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if _, err := secrets.Get(f.ctx, podprovider.CloudInitSecretName(name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("cloud-init Secret after Delete: %v, want NotFound", err)
	}
	if err := f.prov.Delete(f.ctx, inst.ID); err != nil {
		t.Errorf("deleting a deleted instance: %v", err)
	}
	for _, id := range []string{"no-slash", "a/b/c", ""} {
		if _, err := f.prov.Get(f.ctx, id); !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("Get(%q): %v, want ErrNotFound", id, err)
		}
	}
}

func TestCreateRefusesAForeignPod(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ns := f.namespace(nil)
	p := f.proxy(ns, podProxy("p1"))
	foreign := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: provider.InstanceName(p.UID)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if _, err := f.kube.CoreV1().Pods(ns).Create(f.ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := f.prov.Create(f.ctx, createRequest(p, nil))
	if provider.Class(err) != provider.ErrPermanent {
		t.Errorf("Create over a foreign Pod: %v (class %v), want a permanent error", err, provider.Class(err))
	}
}

func TestListByTag(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	long := strings.Repeat("n", 63) + "." + strings.Repeat("a", 63) + "." + strings.Repeat("m", 63) + "." + strings.Repeat("e", 61)
	prefixTwin := long[:len(long)-1] + "x" // shares the first 252 characters, so the label prefix too
	nsA, nsB := f.namespace(nil), f.namespace(nil)
	proxies := []*crawlv1alpha1.Proxy{
		f.proxy(nsA, podProxy(long)),
		f.proxy(nsB, podProxy(long)),
		f.proxy(nsB, podProxy(prefixTwin)),
		f.proxy(nsB, podProxy("short")),
	}
	ids := map[string]*crawlv1alpha1.Proxy{}
	for _, p := range proxies {
		inst, err := f.prov.Create(f.ctx, createRequest(p, nil))
		if err != nil {
			t.Fatal(err)
		}
		ids[inst.ID] = p
	}
	idOf := func(p *crawlv1alpha1.Proxy) string { return p.Namespace + "/" + provider.InstanceName(p.UID) }

	tests := map[string]struct {
		key, value string
		want       []string
	}{
		"a 253-character name, in two namespaces": {key: crawlv1alpha1.TagProxyName, value: long, want: []string{idOf(proxies[0]), idOf(proxies[1])}},
		"its twin":                     {key: crawlv1alpha1.TagProxyName, value: prefixTwin, want: []string{idOf(proxies[2])}},
		"a short name":                 {key: crawlv1alpha1.TagProxyName, value: "short", want: []string{idOf(proxies[3])}},
		"a UID":                        {key: crawlv1alpha1.TagProxyUID, value: string(proxies[1].UID), want: []string{idOf(proxies[1])}},
		"managed by the operator":      {key: crawlv1alpha1.TagManagedBy, value: crawlv1alpha1.ManagedByValue, want: []string{idOf(proxies[0]), idOf(proxies[1]), idOf(proxies[2]), idOf(proxies[3])}},
		"a value no Pod carries":       {key: crawlv1alpha1.TagProxyUID, value: "none"},
		"a value no label could carry": {key: crawlv1alpha1.TagProxyName, value: "not a label value!"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			insts, err := f.prov.ListByTag(f.ctx, tc.key, tc.value)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, inst := range insts {
				p, ours := ids[inst.ID]
				if !ours {
					continue // another test's Pod
				}
				got = append(got, inst.ID)
				if diff := cmp.Diff(provider.Tags(p), inst.Tags); diff != "" {
					t.Errorf("%s tags (-want +got):\n%s", inst.ID, diff)
				}
			}
			slices.Sort(got)
			slices.Sort(tc.want)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("instances (-want +got):\n%s", diff)
			}
		})
	}
}

// TestErrorClassesFromTheAPIServer: the classes of errors as a real API
// server words them.
func TestErrorClassesFromTheAPIServer(t *testing.T) {
	env := apiServer.Get(t)
	t.Parallel()
	f := newFixture(t)

	t.Run("an invalid Pod is permanent", func(t *testing.T) {
		ns := f.namespace(nil)
		p := f.proxy(ns, podProxy("p1", func(p *crawlv1alpha1.Proxy) {
			// The CRD cannot check label syntax in nodeSelector; the Pod's validation does.
			p.Spec.Kubernetes = &crawlv1alpha1.KubernetesProvider{NodeSelector: map[string]string{"not a label!": "x"}}
		}))
		_, err := f.prov.Create(f.ctx, createRequest(p, nil))
		if provider.Class(err) != provider.ErrPermanent || !apierrors.IsInvalid(err) {
			t.Errorf("got %v (class %v), want a permanent Invalid", err, provider.Class(err))
		}
	})

	t.Run("no RBAC permission is permanent", func(t *testing.T) {
		ns := f.namespace(nil)
		p := f.proxy(ns, podProxy("p1"))
		token, err := env.ServiceAccountToken(f.ctx, ns, "nobody", 0)
		if err != nil {
			t.Fatal(err)
		}
		prov := podprovider.New(kubernetes.NewForConfigOrDie(env.UserConfig(token)), podprovider.Options{})
		_, err = prov.Create(f.ctx, createRequest(p, nil))
		if provider.Class(err) != provider.ErrPermanent || !apierrors.IsForbidden(err) {
			t.Errorf("Create: %v (class %v), want a permanent Forbidden", err, provider.Class(err))
		}
		_, err = prov.Get(f.ctx, ns+"/px-0")
		if provider.Class(err) != provider.ErrPermanent {
			t.Errorf("Get: %v (class %v), want permanent", err, provider.Class(err))
		}
	})

	t.Run("a quota whose usage is not computed yet is transient", func(t *testing.T) {
		ns := f.namespace(nil)
		p := f.proxy(ns, podProxy("p1"))
		quotas := f.kube.CoreV1().ResourceQuotas(ns)
		hard := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")}
		quota, err := quotas.Create(f.ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "pods"}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The state the quota controller passes through: the limit known,
		// the usage not yet counted. (It does not run here.)
		quota.Status.Hard = hard
		if _, err := quotas.UpdateStatus(f.ctx, quota, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The admission plugin sees the quota through its own cache: until
		// it does, Pods are admitted (and deleted here again).
		req := createRequest(p, nil)
		eventually.Check(t, waitTimeout, 50*time.Millisecond, "the quota applying", func(ctx context.Context) error {
			inst, err := f.prov.Create(ctx, req)
			if err != nil {
				return nil
			}
			if err := f.prov.Delete(ctx, inst.ID); err != nil {
				return fmt.Errorf("%w: %w", eventually.ErrHopeless, err)
			}
			return errors.New("a Pod was admitted")
		})
		_, err = f.prov.Create(f.ctx, req)
		if provider.Class(err) != provider.ErrTransient || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "status unknown for quota") {
			t.Errorf("got %v (class %v), want a transient Forbidden", err, provider.Class(err))
		}
	})
}
