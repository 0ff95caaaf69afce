package testenv

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

// RepoRoot is the root of this module's checkout, found from the test's
// working directory (as Start finds bin/ and the CRDs).
func RepoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := findRepoRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// GrantLeasing gives the ServiceAccounts every lease verb on the Proxies of
// ns (Role and RoleBinding "proxy-leaser"), then waits up to a minute until
// the RBAC authorizer allows each of them. Ask before the lease API does, so
// that it never caches a denial from before the binding reached the
// authorizer.
func GrantLeasing(t testing.TB, kube kubernetes.Interface, ns string, serviceAccounts ...types.NamespacedName) {
	t.Helper()
	ctx := t.Context()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proxy-leaser"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{crawlv1alpha1.SchemeGroupVersion.Group},
			Resources: []string{"proxies/leases"},
			Verbs:     []string{"create", "update", "delete", "get", "list"},
		}},
	}
	if _, err := kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proxy-leaser"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
	}
	for _, sa := range serviceAccounts {
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name})
	}
	if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, sa := range serviceAccounts {
		eventually.Check(t, time.Minute, 50*time.Millisecond, "RBAC allows "+sa.String(), func(ctx context.Context) error {
			review, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   "system:serviceaccount:" + sa.Namespace + ":" + sa.Name,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + sa.Namespace, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: ns, Verb: "create", Group: crawlv1alpha1.SchemeGroupVersion.Group, Resource: "proxies", Subresource: "leases",
				},
			}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if !review.Status.Allowed {
				return errors.New("not allowed yet")
			}
			return nil
		})
	}
}
