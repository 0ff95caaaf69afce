package gatewayintegration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// tierDoors are what a gateway-tier replica (pkg/gatewaycmd) uses: its own
// ServiceAccount, bound cluster-wide to artifacts/rbac/gateway-role.yaml
// and nothing else, reviews its callers with the real API server and calls
// the lease API over HTTP for them (act-for).
func (h *harness) tierDoors(t *testing.T, authOpts auth.KubernetesOptions) (gateway.Leases, auth.Authenticator, auth.Authorizer) {
	t.Helper()
	token := h.clusterServiceAccount(t, "gateway", artifactRole(t, "gateway-role.yaml"))
	remote, err := gateway.NewRemote(gateway.RemoteConfig{
		URLs:  []string{h.leaseURL},
		Token: func(context.Context) (string, error) { return token, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	auth := auth.NewKubernetes(kubernetes.NewForConfigOrDie(h.env.UserConfig(token)), authOpts)
	return remote, auth, auth
}

// clusterServiceAccount creates the ServiceAccount name in the harness's
// namespace, binds role to it cluster-wide, and returns its token once the
// authorizer grants every rule of the role.
func (h *harness) clusterServiceAccount(t *testing.T, name string, role *rbacv1.ClusterRole) string {
	t.Helper()
	ctx := t.Context()
	token, err := h.env.ServiceAccountToken(ctx, h.ns, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: h.ns + "-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: h.ns, Name: name}},
	}
	if _, err := h.kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	self := kubernetes.NewForConfigOrDie(h.env.UserConfig(token))
	poll(t, name+"'s ClusterRoleBinding reaches the authorizer", func() bool {
		for _, rule := range role.Rules {
			if !mayCluster(ctx, self, rule) {
				return false
			}
		}
		return true
	})
	return token
}

// mayCluster asks the API server, as the caller, whether it may the first
// verb of rule on its first resource across the cluster.
func mayCluster(ctx context.Context, self kubernetes.Interface, rule rbacv1.PolicyRule) bool {
	resource, subresource, _ := strings.Cut(rule.Resources[0], "/")
	review, err := self.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: rule.Verbs[0], Group: rule.APIGroups[0], Resource: resource, Subresource: subresource,
		}},
	}, metav1.CreateOptions{})
	return err == nil && review.Status.Allowed
}

// fetched is one answer through the gateway.
type fetched struct {
	status int
	via    string
	body   string
}

// fetchFrom GETs target through the gateway as username:token, on a
// connection from source (a loopback address such as 127.0.0.2: Linux
// routes all of 127/8 to lo), with header added to the request.
func (h *harness) fetchFrom(t *testing.T, source, username, token, target string, header http.Header) fetched {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 10 * time.Second}
	proxy := &url.URL{Scheme: "http", Host: h.gatewayAddr, User: url.UserPassword(username, token)}
	c := &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DialContext: dialer.DialContext, DisableKeepAlives: true},
		Timeout:   30 * time.Second,
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s through the gateway from %s: %v", target, source, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return fetched{status: resp.StatusCode, via: resp.Header.Get("Via"), body: string(body)}
}

func (f fetched) String() string {
	return fmt.Sprintf("%d (Via %q) %q", f.status, f.via, strings.TrimSpace(f.body))
}

// namedUpstream starts the project's forward proxy as an External Proxy in
// pool, requiring its own password; its answers carry "Via: 1.1 <name>".
func (h *harness) namedUpstream(t *testing.T, name, pool string, latency int64) *upstream {
	t.Helper()
	password := "secret-of-" + name
	p := proxytest.StartInProcess(t, proxytest.Options{
		Username: upstreamUser, Password: password,
		Configure: func(c *forwardproxy.Config) { c.Name = name },
	})
	return h.addUpstream(t, name, pool, p, upstreamUser, password, latency)
}

// servedVia names the upstream whose Via the answer carries, "" if none.
func servedVia(ups []*upstream, f fetched) string {
	for _, u := range ups {
		if strings.Contains(f.via, " "+u.name) {
			return u.name
		}
	}
	return ""
}
