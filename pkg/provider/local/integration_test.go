package local_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/local"
	"github.com/proxyfleet/proxy-operator/pkg/testing/controllertest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// countingProvider counts the calls that reach the provider.
type countingProvider struct {
	provider.Provider
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingProvider) count(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[op]++
}

func (c *countingProvider) callsOf(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[op]
}

func (c *countingProvider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	c.count("create")
	return c.Provider.Create(ctx, req)
}

func (c *countingProvider) Get(ctx context.Context, id string) (provider.Instance, error) {
	c.count("get")
	return c.Provider.Get(ctx, id)
}

// runOperator runs the real controller in-process, with a new local
// provider over stateDir, as the operator does: its Secrets function reads
// the Secret lister. Stopping it (the returned function, or the test's end)
// cancels the controller and waits for it; the instances stay.
func runOperator(t *testing.T, ns, stateDir string) (*countingProvider, func()) {
	t.Helper()
	var prov *countingProvider
	h := controllertest.Start(t, apiServer(t).Config, controllertest.Options{
		Namespace: ns,
		Workers:   2,
		Registry:  provider.Registry{local.Registration()},
		ProvidersWithSecrets: func(secrets corelisters.SecretLister) map[crawlv1alpha1.ProviderName]provider.Provider {
			lp, err := local.New(local.Options{
				StateDir: stateDir,
				Binary:   proxytest.ForwardProxyBinary(t),
				Secrets: func(_ context.Context, namespace, name string) (*corev1.Secret, error) {
					return secrets.Secrets(namespace).Get(name)
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			prov = &countingProvider{Provider: lp, calls: map[string]int{}}
			return map[crawlv1alpha1.ProviderName]provider.Provider{crawlv1alpha1.ProviderLocal: prov}
		},
	})
	return prov, h.Stop
}

func TestControllerRunsLocalInstances(t *testing.T) {
	const user, pass = "crawler", "integration-Pa55"
	cfg := apiServer(t).Config
	kube := kubernetes.NewForConfigOrDie(cfg)
	crawl := versioned.NewForConfigOrDie(cfg)
	ctx := context.Background()
	nsObj, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "local-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	stateDir := filepath.Join(t.TempDir(), "state")
	t.Cleanup(func() { deleteAll(t, stateDir) })

	secret := newSecret("proxy-auth", user, pass)
	secret.Namespace = ns
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first, stopFirst := runOperator(t, ns, stateDir)
	proxy := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dev"},
		Spec: crawlv1alpha1.ProxySpec{
			Provider:  crawlv1alpha1.ProviderLocal,
			Auth:      &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: "proxy-auth"}},
			CloudInit: &crawlv1alpha1.CloudInit{Inline: ptr.To("#cloud-config\n")},
		},
	}
	created, err := crawl.CrawlV1alpha1().Proxies(ns).Create(ctx, proxy, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := provider.InstanceName(created.UID)

	// Provisioned=True, with the address of a real process.
	var p *crawlv1alpha1.Proxy
	until(t, 30*time.Second, "Provisioned=True", func() (bool, string) {
		p, err = crawl.CrawlV1alpha1().Proxies(ns).Get(ctx, "dev", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned),
			fmt.Sprintf("phase %s, conditions %+v", p.Status.Phase, p.Status.Conditions)
	})
	st := readStateFile(t, stateDir, id)
	if p.Status.ProviderID != provider.ProviderID("local", id) || p.Status.IP != "127.0.0.1" || p.Status.Port != st.Port {
		t.Errorf("status %+v, want instance %s at 127.0.0.1:%d", p.Status, id, st.Port)
	}
	target := proxytest.StartHTTPSTarget(t)
	proxyURL := &url.URL{Scheme: "http", Host: net.JoinHostPort(p.Status.IP, strconv.Itoa(int(p.Status.Port))), User: url.UserPassword(user, pass)}
	if res, err := proxytest.Fetch(ctx, proxyURL, target.URL+"/generate_204", proxytest.RootCAs(target)); err != nil || res.Status != http.StatusNoContent {
		t.Errorf("through the proxy the controller made: %d, %v", res.Status, err)
	}
	if n := first.callsOf("create"); n != 1 {
		t.Errorf("%d creates, want 1", n)
	}

	// An operator restart keeps the instance: same process, and only one.
	stopFirst()
	second, _ := runOperator(t, ns, stateDir)
	until(t, 30*time.Second, "the restarted controller observes the instance", func() (bool, string) {
		n := second.callsOf("get")
		return n >= 1, fmt.Sprintf("%d gets", n)
	})
	if n := second.callsOf("create"); n != 0 {
		t.Errorf("the restarted controller called Create %d times", n)
	}
	if got := readStateFile(t, stateDir, id); got.PID != st.PID {
		t.Errorf("pid %d after the restart, want %d", got.PID, st.PID)
	}
	if got := processesLoggingTo(t, stateDir); !slices.Equal(got, []int{st.PID}) {
		t.Errorf("processes %v after the restart, want only %d", got, st.PID)
	}
	if p, err := crawl.CrawlV1alpha1().Proxies(ns).Get(ctx, "dev", metav1.GetOptions{}); err != nil ||
		!meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned) || p.Status.Port != st.Port {
		t.Errorf("after the restart: %+v, %v", p.Status, err)
	}

	// Deleting the Proxy stops the process, removes its files, then the object.
	if err := crawl.CrawlV1alpha1().Proxies(ns).Delete(ctx, "dev", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, 30*time.Second, "the Proxy is gone", func() (bool, string) {
		_, err := crawl.CrawlV1alpha1().Proxies(ns).Get(ctx, "dev", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
	if pidAlive(st.PID) {
		t.Errorf("process %d alive after its Proxy was deleted", st.PID)
	}
	if _, err := os.Stat(filepath.Join(stateDir, id+".json")); !os.IsNotExist(err) {
		t.Errorf("state file after the delete: %v", err)
	}
	if files := instanceFiles(t, stateDir, id); len(files) > 0 {
		t.Errorf("files left: %v", files)
	}
}

// TestColonInUsernameIsACredentialsError: with the real local provider, a
// username containing ':' is a Provisioned=False CredentialsError naming the
// key (not a transient error retried forever), no instance is started, and
// fixing the Secret heals the Proxy.
func TestColonInUsernameIsACredentialsError(t *testing.T) {
	cfg := apiServer(t).Config
	kube := kubernetes.NewForConfigOrDie(cfg)
	crawl := versioned.NewForConfigOrDie(cfg)
	ctx := context.Background()
	nsObj, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "local-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	stateDir := filepath.Join(t.TempDir(), "state")
	t.Cleanup(func() { deleteAll(t, stateDir) })
	secret := newSecret("proxy-auth", "crawl:er", "integration-Pa55")
	secret.Namespace = ns
	if secret, err = kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	prov, _ := runOperator(t, ns, stateDir)
	proxy := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dev"},
		Spec: crawlv1alpha1.ProxySpec{
			Provider: crawlv1alpha1.ProviderLocal,
			Auth:     &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: "proxy-auth"}},
		},
	}
	if _, err := crawl.CrawlV1alpha1().Proxies(ns).Create(ctx, proxy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	provisioned := func(wantStatus metav1.ConditionStatus, wantReason, wantMessage string) func() (bool, string) {
		return func() (bool, string) {
			p, err := crawl.CrawlV1alpha1().Proxies(ns).Get(ctx, "dev", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
			return c != nil && c.Status == wantStatus && c.Reason == wantReason && strings.Contains(c.Message, wantMessage),
				fmt.Sprintf("conditions %+v", p.Status.Conditions)
		}
	}
	until(t, 30*time.Second, "Provisioned=False/CredentialsError naming the key",
		provisioned(metav1.ConditionFalse, "CredentialsError", `spec.auth.secretRef: Secret "proxy-auth" key "username" must not contain ':'`))
	if n := prov.callsOf("create"); n != 0 {
		t.Errorf("%d Create calls with unusable credentials, want 0", n)
	}

	secret.Data["username"] = []byte("crawler")
	if _, err := kube.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, 30*time.Second, "Provisioned=True once the Secret is fixed", provisioned(metav1.ConditionTrue, "Created", ""))
}
