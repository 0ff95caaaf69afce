package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/dashboard"
)

// dashboardFlow: an event about a Proxy shows among the dashboard's recent
// events within seconds (the operator's event cache watches), several in a
// row, as for the external flow: an operator that relists with backoff (no
// watch) falls further behind at each.
func (r *operatorRun) dashboardFlow() flow {
	var steps []step
	for i := 1; i <= editsInARow; i++ {
		reason := fmt.Sprintf("E2EMark%d", i)
		steps = append(steps, step{
			name: "dashboard shows event " + reason,
			act: func(ctx context.Context) error {
				now := metav1.Now()
				_, err := r.s.kube.CoreV1().Events(r.proxies).Create(ctx, &corev1.Event{
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
				status, data, err := r.leaseCall(ctx, http.MethodGet, "/ui/api/view", nil)
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
