package dashboard_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/dashboard"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// tenantNamespaces is how many namespaces have something to show, as in
// issue 64's measurement (10 requests over 100 namespaces made 1,010
// reviews).
const tenantNamespaces = 100

// TestRolelessViewerCostsOneReviewAndNoSlot: the operator binary with
// --lease-auth=kubernetes on a real API server, 100 namespaces with an
// event about a Proxy each, and two ServiceAccounts: one bound to no role,
// one allowed to list proxies/leases across all namespaces (an
// administrator). Ten requests of the role-less one at once are refused
// 403 and cost the API server at most ten reviews (counted by the API
// server itself: apiserver_request_total); then it opens as many streams
// as there are slots, all refused, and the administrator's stream still
// opens.
func TestRolelessViewerCostsOneReviewAndNoSlot(t *testing.T) {
	env := shared.Get(t).Env
	kube := kubernetes.NewForConfigOrDie(env.Config)
	home := operatortest.NewNamespace(t, kube)
	nobody, err := env.ServiceAccountToken(t.Context(), home, "nobody", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	admin := adminViewerToken(t, kube, home)
	for i := range tenantNamespaces {
		ns := operatortest.NewNamespace(t, kube)
		now := metav1.Now()
		_, err := kube.CoreV1().Events(ns).Create(t.Context(), &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "mark-"},
			InvolvedObject: corev1.ObjectReference{APIVersion: crawlv1alpha1.SchemeGroupVersion.String(),
				Kind: "Proxy", Namespace: ns, Name: fmt.Sprintf("px-%d", i)},
			Reason: "Mark", Message: "something to show", Type: corev1.EventTypeNormal,
			FirstTimestamp: now, LastTimestamp: now, Count: 1, Source: corev1.EventSource{Component: "test"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	op := operatortest.Start(t, operatortest.ProcessOptions{
		Binary: shared.Get(t).Binary, Name: "operator", LogsEnv: "DASHBOARD_LOGS",
		Args: []string{"--kubeconfig=" + kubeconfig, "--leader-elect-namespace=" + home, "-v=2", "--lease-auth=kubernetes"},
	})
	base := "http://" + op.LeaseAddr
	eventually.Check(t, 2*time.Minute, interval, "the administrator sees every namespace's event", func(ctx context.Context) error {
		code, body, err := getWithToken(ctx, base+"/ui/api/view", admin)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("GET /ui/api/view: %d %.200s %v", code, body, err)
		}
		if n := bytes.Count(body, []byte(`"reason":"Mark"`)); n < tenantNamespaces {
			return fmt.Errorf("%d of %d events shown", n, tenantNamespaces)
		}
		return nil
	})

	// Ten requests at once, as ten tabs or a script would: a cache that
	// each misses on its own would not help.
	before := apiServerReviews(t, kube)
	const requests = 10
	start := time.Now()
	var requestsDone sync.WaitGroup
	for i := range requests {
		requestsDone.Go(func() {
			code, body, err := getWithToken(t.Context(), base+"/ui/api/view", nobody)
			if err != nil {
				t.Error(err)
			} else if code != http.StatusForbidden {
				t.Errorf("request %d of the role-less identity: %d %.200s, want 403", i, code, body)
			}
		})
	}
	requestsDone.Wait()
	took := time.Since(start)
	after := apiServerReviews(t, kube)
	sars, tokens := after.sars-before.sars, after.tokens-before.tokens
	t.Logf("%d requests of a role-less identity over %d namespaces took %v: the API server received %v SubjectAccessReviews and %v TokenReviews",
		requests, tenantNamespaces, took.Round(time.Millisecond), sars, tokens)
	if sars > requests || tokens > requests {
		t.Errorf("%d requests cost %v SubjectAccessReviews and %v TokenReviews; want at most one of each per request", requests, sars, tokens)
	}

	// Every slot asked for at once by the role-less identity: none taken.
	var wg sync.WaitGroup
	codes := make([]int, dashboard.DefaultMaxViewers)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel() // closes any stream that was let in
	for i := range codes {
		wg.Go(func() { codes[i] = openStream(ctx, t, base, nobody) })
	}
	wg.Wait()
	refused := 0
	for _, c := range codes {
		if c == http.StatusForbidden {
			refused++
		}
	}
	if refused != len(codes) {
		t.Errorf("%d of %d streams of the role-less identity refused 403 (codes %v)", refused, len(codes), codes)
	}
	if code := openStream(ctx, t, base, admin); code != http.StatusOK {
		t.Errorf("the administrator's stream: %d, want 200", code)
	}
}

// adminViewerToken is a token of a ServiceAccount allowed to list
// proxies/leases in every namespace (a ClusterRoleBinding).
func adminViewerToken(t *testing.T, kube kubernetes.Interface, ns string) string {
	t.Helper()
	name := "dashboard-admin-" + ns
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{crawlv1alpha1.SchemeGroupVersion.Group}, Resources: []string{"proxies/leases"}, Verbs: []string{"list"}}}}
	if _, err := kube.RbacV1().ClusterRoles().Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "admin"}}}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	token, err := shared.Get(t).Env.ServiceAccountToken(t.Context(), ns, "admin", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

func getWithToken(ctx context.Context, url, token string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, err = body.ReadFrom(resp.Body)
	return resp.StatusCode, body.Bytes(), err
}

// openStream opens a dashboard stream and returns its status; a stream let
// in stays open (and holds its slot) until ctx ends.
func openStream(ctx context.Context, t *testing.T, base, token string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/ui/api/stream", nil)
	if err != nil {
		t.Error(err)
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return resp.StatusCode
	}
	context.AfterFunc(ctx, func() { resp.Body.Close() })
	return resp.StatusCode
}

// reviewCounts are the reviews the API server has answered so far.
type reviewCounts struct{ sars, tokens float64 }

// apiServerReviews reads the API server's own count of the
// SubjectAccessReviews and TokenReviews it received
// (apiserver_request_total): what the operator sends, whatever it says.
func apiServerReviews(t *testing.T, kube kubernetes.Interface) reviewCounts {
	t.Helper()
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("reading the API server's metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parsing the API server's metrics: %v", err)
	}
	var c reviewCounts
	for _, m := range families["apiserver_request_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		switch labels["resource"] {
		case "subjectaccessreviews":
			c.sars += m.GetCounter().GetValue()
		case "tokenreviews":
			c.tokens += m.GetCounter().GetValue()
		}
	}
	return c
}
