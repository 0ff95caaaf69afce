package gatewaytier

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// leaseTimings are short leader-election settings: a killed leader is
// replaced within seconds.
var leaseTimings = []string{
	"--leader-elect-lease-duration=3s",
	"--leader-elect-renew-deadline=2s",
	"--leader-elect-retry-period=500ms",
}

// tierSetup is the running tier: the operators (the first leads), the
// gateways, the upstreams and the crawler's token.
type tierSetup struct {
	ns        string
	operators [2]*operatortest.Process
	gateways  [2]*operatortest.Process
	// crawlerToken is the password of every connection.
	crawlerToken string
	target       *streamTarget
	crawl        versioned.Interface
}

// startTier brings up three Ready External upstreams (20 leases each), two
// operators and two gateways, the gateways on their own ServiceAccount with
// artifacts/rbac/gateway-role.yaml alone.
func startTier(t *testing.T) *tierSetup {
	t.Helper()
	setup := shared.Get(t)
	env := setup.Env
	kube := kubernetes.NewForConfigOrDie(env.Config)
	crawl := versioned.NewForConfigOrDie(env.Config)
	s := &tierSetup{ns: operatortest.NewNamespace(t, kube), target: startStreamTarget(t), crawl: crawl}
	ctx := t.Context()

	health := proxytest.StartHTTPTarget(t)
	for i := range 3 {
		up := proxytest.StartInProcess(t, proxytest.Options{})
		_, port, _ := net.SplitHostPort(up.Addr)
		portN, _ := strconv.Atoi(port)
		p := &crawlv1alpha1.Proxy{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: fmt.Sprintf("up%d", i)},
			Spec: crawlv1alpha1.ProxySpec{
				Mode:      crawlv1alpha1.ModeExternal,
				Endpoint:  &crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: int32(portN)},
				MaxLeases: 20,
				HealthCheck: crawlv1alpha1.HealthCheck{
					URL:      health.URL + "/generate_204",
					Interval: &metav1.Duration{Duration: time.Second},
					Timeout:  &metav1.Duration{Duration: 900 * time.Millisecond},
				},
			},
		}
		if _, err := crawl.CrawlV1alpha1().Proxies(s.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	s.crawlerToken = serviceAccount(t, env, kube, s.ns, "crawler", "proxy-operator-crawler", false)
	gatewayToken := serviceAccount(t, env, kube, s.ns, "gateway", "proxy-operator-gateway", true)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "gateway-token")
	if err := os.WriteFile(tokenFile, []byte(gatewayToken), 0o600); err != nil {
		t.Fatal(err)
	}
	gatewayKubeconfig := filepath.Join(dir, "gateway-kubeconfig")
	if err := env.WriteUserKubeconfig(gatewayKubeconfig, gatewayToken); err != nil {
		t.Fatal(err)
	}

	for i := range s.operators {
		s.operators[i] = operatortest.StartOnNamespace(t, env, setup.Binary, fmt.Sprintf("operator-%d", i), s.ns, "TIER_LOGS", leaseTimings...)
		if i == 0 {
			poll(t, "operator-0 leads the lease API", 30*time.Second, func() error { return s.leading(ctx, s.operators[0]) })
		}
	}
	poll(t, "the three upstreams are Ready", 30*time.Second, func() error { return s.readyUpstreams(ctx, 3) })

	urls := "http://" + s.operators[0].LeaseAddr + ",http://" + s.operators[1].LeaseAddr
	for i := range s.gateways {
		s.gateways[i] = operatortest.Start(t, operatortest.ProcessOptions{
			Binary: setup.Binary, Name: fmt.Sprintf("gateway-%d", i), Gateway: true, LogsEnv: "TIER_LOGS",
			Args: []string{
				"--kubeconfig=" + gatewayKubeconfig, "--lease-token-file=" + tokenFile, "--lease-url=" + urls,
				"--gateway-lease-ttl=10s", "--drain-delay=1s", "--shutdown-grace=30s", "-v=3",
			},
		})
	}
	for _, gw := range s.gateways {
		poll(t, gw.Name+" ready", 30*time.Second, func() error { return ready(ctx, gw) })
	}
	return s
}

// serviceAccount creates a ServiceAccount bound to an artifacts/rbac
// ClusterRole (cluster-wide, or in ns) and returns its token once the
// authorizer knows the binding.
func serviceAccount(t *testing.T, env *testenv.Environment, kube kubernetes.Interface, ns, name, roleName string, clusterWide bool) string {
	t.Helper()
	ctx := t.Context()
	token, err := env.ServiceAccountToken(ctx, ns, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	role := artifactRole(t, roleName)
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}
	// What the lease API will ask about this account (auth.Attributes).
	attrs := authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: crawlv1alpha1.SchemeGroupVersion.Group, Resource: "proxies", Subresource: "leases"}
	if clusterWide {
		attrs = authorizationv1.ResourceAttributes{Verb: auth.VerbActFor, Group: auth.ActForGroup, Resource: auth.ActForResource}
		_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name}, RoleRef: ref, Subjects: subjects}, metav1.CreateOptions{})
	} else {
		_, err = kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, RoleRef: ref, Subjects: subjects}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + ns + ":" + name
	poll(t, name+"'s binding reaches the authorizer", 30*time.Second, func() error {
		review, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, ResourceAttributes: &attrs,
		}}, metav1.CreateOptions{})
		if err != nil || !review.Status.Allowed {
			return fmt.Errorf("%s may not %s %s.%s yet (%v)", user, attrs.Verb, attrs.Resource, attrs.Group, err)
		}
		return nil
	})
	return token
}

func artifactRole(t *testing.T, name string) *rbacv1.ClusterRole {
	t.Helper()
	file := map[string]string{"proxy-operator-crawler": "crawler-role.yaml", "proxy-operator-gateway": "gateway-role.yaml"}[name]
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

// leading is nil when op answers /readyz of its lease API as the leader.
func (s *tierSetup) leading(ctx context.Context, op *operatortest.Process) error {
	status, body, err := operatortest.Get(ctx, "http://"+op.LeaseAddr+"/readyz")
	if err != nil || status != http.StatusOK {
		return fmt.Errorf("%s: %d %s %v", op.Name, status, body, err)
	}
	return nil
}

func ready(ctx context.Context, p *operatortest.Process) error {
	status, body, err := p.Get(ctx, "/readyz")
	if err != nil || status != http.StatusOK {
		return fmt.Errorf("%s /readyz: %d %s %v", p.Name, status, body, err)
	}
	return nil
}

func (s *tierSetup) readyUpstreams(ctx context.Context, want int) error {
	list, err := s.crawl.CrawlV1alpha1().Proxies(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	n := 0
	for _, p := range list.Items {
		if p.Status.Phase == crawlv1alpha1.PhaseReady {
			n++
		}
	}
	if n != want {
		return fmt.Errorf("%d of %d Ready", n, want)
	}
	return nil
}

// leases lists the crawler's live leases on whichever operator leads.
func (s *tierSetup) leases(ctx context.Context) ([]wire.Lease, error) {
	var lastErr error
	for _, op := range s.operators {
		if !op.Running() {
			continue
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+op.LeaseAddr+"/v1/leases?namespace="+s.ns, nil)
		req.Header.Set("Authorization", "Bearer "+s.crawlerToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			lastErr = err
			continue
		}
		var list wire.List[wire.Lease]
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && err == nil {
			return list.Items, nil
		}
		lastErr = fmt.Errorf("%s: %d (%v)", op.Name, resp.StatusCode, err)
	}
	return nil, lastErr
}

// sessionUpstream is the proxy of the session's one live lease.
func (s *tierSetup) sessionUpstream(ctx context.Context, session string) (string, error) {
	ls, err := s.leases(ctx)
	if err != nil {
		return "", err
	}
	var proxies []string
	for _, l := range ls {
		if l.Session == session {
			proxies = append(proxies, l.Proxy.Name)
		}
	}
	if len(proxies) != 1 {
		return "", fmt.Errorf("session %s holds %v, want one lease", session, proxies)
	}
	return proxies[0], nil
}

func poll(t *testing.T, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
