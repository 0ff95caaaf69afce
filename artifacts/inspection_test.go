package artifacts_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

const (
	// caNamespace is where the chart keeps the inspection CA keys by default.
	caNamespace = namespace + "-inspection-ca"
	// leaseKeySecret is pkg/operator's LeaseKeySecret, the lease-ID signing
	// key (not imported: it would build the whole operator into this test).
	leaseKeySecret = "proxy-operator-lease-key"
)

// secretAccess is one question about a ServiceAccount and Secrets.
type secretAccess struct {
	serviceAccount string
	verb           string
	namespace      string
	name           string // "" for every Secret of the namespace
	allowed        bool
}

func (a secretAccess) String() string {
	what := "secrets"
	if a.name != "" {
		what += "/" + a.name
	}
	return fmt.Sprintf("%s %s %s in %s", a.serviceAccount, a.verb, what, a.namespace)
}

// With inspection on, the chart's gateway reads the CA keys in a namespace
// of their own and no other Secret: installed on a real API server, its
// ServiceAccount may not get the lease-ID signing key nor a cloud token
// Secret of the release's namespace, nor list that namespace's Secrets,
// while it may get, list and watch the CA Secrets, which the operator may
// write. Both workloads are pointed at that namespace.
func TestInspectionKeysAreTheGatewaysOnlySecrets(t *testing.T) {
	integration.Needs(t, testenv.Needs)
	stream := renderHelm(t, "inspection.enabled=true")
	objs := byKey(decode(t, stream))
	for _, workload := range []string{"Deployment " + namespace + "/proxy-operator", "Deployment " + namespace + "/proxy-operator-gateway"} {
		if args := containerArgs(t, objs[workload]); !slices.Contains(args, "--inspection-ca-namespace="+caNamespace) {
			t.Errorf("%s: args %v, want --inspection-ca-namespace=%s", workload, args, caNamespace)
		}
	}
	if objs["Namespace /"+caNamespace] == nil {
		t.Errorf("the chart makes no Namespace %s", caNamespace)
	}

	env, kubeconfig, kubectl := startAPIServer(t)
	run(t, nil, kubectl, "--kubeconfig", kubeconfig, "create", "namespace", namespace)
	// What decides who reads what: the namespaces, ServiceAccounts and
	// roles, installed for real (the workloads need a node; they are not).
	// The namespaces go first, as Helm installs them.
	for _, kinds := range [][]string{{"Namespace"}, {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}} {
		var docs []string
		for _, o := range objs {
			if !slices.Contains(kinds, o.GetKind()) {
				continue
			}
			raw, err := json.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, string(raw))
		}
		run(t, []byte(strings.Join(docs, "\n---\n")), kubectl, "--kubeconfig", kubeconfig,
			"apply", "--server-side", "--field-manager=install-test", "-f", "-")
	}

	gateway, op := namespace+"-gateway", namespace
	questions := []secretAccess{
		{gateway, "get", namespace, leaseKeySecret, false},
		{gateway, "get", namespace, "hetzner-token", false},
		{gateway, "list", namespace, "", false},
		{gateway, "watch", namespace, "", false},
		{gateway, "get", caNamespace, "inspection-ca-crawl", true},
		{gateway, "list", caNamespace, "", true},
		{gateway, "watch", caNamespace, "", true},
		{gateway, "create", caNamespace, "", false},
		{op, "create", caNamespace, "", true},
		{op, "update", caNamespace, "inspection-ca-crawl", true},
		{op, "delete", caNamespace, "inspection-ca-crawl", true},
	}
	kube := kubernetes.NewForConfigOrDie(env.Config)
	// The roles reach the authorizer within a moment: wait for what they
	// should allow, then ask everything, so that a chart that allows too
	// much or too little is told in full.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := eventually.Poll(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		for _, q := range questions {
			if allowed, err := mayAccess(ctx, kube, q); err != nil || q.allowed && !allowed {
				return fmt.Errorf("%s: allowed %v, %v", q, allowed, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("the chart's roles in force: %v", err)
	}
	for _, q := range questions {
		allowed, err := mayAccess(t.Context(), kube, q)
		if err != nil {
			t.Fatal(err)
		}
		if allowed != q.allowed {
			t.Errorf("%s: allowed %v, want %v", q, allowed, q.allowed)
		}
	}
}

// mayAccess asks the API server's authorizer (a SubjectAccessReview) about q,
// for the ServiceAccount's token's user and groups.
func mayAccess(ctx context.Context, kube kubernetes.Interface, q secretAccess) (bool, error) {
	review, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + namespace + ":" + q.serviceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: q.namespace, Verb: q.verb, Resource: "secrets", Name: q.name,
		},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return review.Status.Allowed, nil
}
