package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/dashboard"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

// dashboardFlow: an event about a Proxy shows among the dashboard's recent
// events within seconds (the operator's event cache watches) to a viewer
// bound in the namespace just before (its RoleBinding cache watches too),
// several in a row, as for the external flow: an operator that relists
// with backoff (no watch) falls further behind at each.
func (r *operatorRun) dashboardFlow() flow {
	var steps []step
	for i := 1; i <= editsInARow; i++ {
		reason := fmt.Sprintf("E2EMark%d", i)
		var token string
		steps = append(steps, step{
			name: "dashboard shows event " + reason + " to a viewer bound just before",
			act: func(ctx context.Context) (err error) {
				if token, err = r.newDashboardViewer(ctx, fmt.Sprintf("dash-viewer-%d", i)); err != nil {
					return err
				}
				now := metav1.Now()
				_, err = r.s.kube.CoreV1().Events(r.proxies).Create(ctx, &corev1.Event{
					ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-mark-"},
					InvolvedObject: corev1.ObjectReference{APIVersion: crawlv1alpha1.SchemeGroupVersion.String(),
						Kind: "Proxy", Namespace: r.proxies, Name: "dashboard-mark"},
					Reason: reason, Message: "a mark for the dashboard flow", Type: corev1.EventTypeNormal,
					FirstTimestamp: now, LastTimestamp: now, Count: 1,
					Source: corev1.EventSource{Component: "e2e"},
				}, metav1.CreateOptions{})
				return err
			},
			done: func(ctx context.Context) error {
				status, data, err := r.leaseCallAs(ctx, token, http.MethodGet, "/ui/api/view", nil)
				if err != nil {
					return err
				}
				if status != http.StatusOK {
					return fmt.Errorf("GET /ui/api/view: %d %s", status, data)
				}
				var msg dashboard.Message
				if err := json.Unmarshal(data, &msg); err != nil {
					return err
				}
				if !slices.ContainsFunc(msg.View.Events, func(e dashboard.EventRow) bool {
					return e.Namespace == r.proxies && e.Reason == reason
				}) {
					return fmt.Errorf("the dashboard's %d events do not include %s", len(msg.View.Events), reason)
				}
				return nil
			},
			bound: editBound,
		})
	}
	return flow{name: "dashboard", steps: steps}
}

// newDashboardViewer makes a ServiceAccount of the Proxy namespace, binds it
// there as crawler-role.yaml says, waits until the API server's RBAC
// allows it to list proxies/leases (so that the operator never reviews it
// before), and returns a token of it.
func (r *operatorRun) newDashboardViewer(ctx context.Context, name string) (string, error) {
	kube := r.s.kube
	if _, err := kube.CoreV1().ServiceAccounts(r.proxies).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.proxies},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.artifacts.crawlerRole.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: r.proxies}},
	}
	if _, err := kube.RbacV1().RoleBindings(r.proxies).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	user := "system:serviceaccount:" + r.proxies + ":" + name
	err := eventually.Poll(ctx, pollInterval, func(ctx context.Context) error {
		review, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + r.proxies, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: r.proxies, Verb: "list",
				Group: crawlv1alpha1.SchemeGroupVersion.Group, Resource: "proxies", Subresource: "leases"},
		}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !review.Status.Allowed {
			return fmt.Errorf("%s may not list proxies/leases yet", user)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	resp, err := kube.CoreV1().ServiceAccounts(r.proxies).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return resp.Status.Token, nil
}
