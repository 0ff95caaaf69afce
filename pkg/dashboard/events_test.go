package dashboard

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

func event(ns, kind, name, reason string, last time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "." + reason},
		InvolvedObject: corev1.ObjectReference{APIVersion: crawlv1alpha1.SchemeGroupVersion.String(), Kind: kind,
			Namespace: ns, Name: name},
		Type: corev1.EventTypeNormal, Reason: reason, Message: reason + " " + name, Count: 1,
		LastTimestamp: metav1.NewTime(last),
	}
}

func TestEventRows(t *testing.T) {
	pod := event("a", "Pod", "web-0", "Pulled", t0)
	pod.InvolvedObject.APIVersion = "v1"
	series := event("a", "Proxy", "p-1", "Probed", t0)
	series.Count = 0
	series.Series = &corev1.EventSeries{Count: 7, LastObservedTime: metav1.NewMicroTime(t0.Add(3 * time.Second))}
	tests := map[string]struct {
		events []*corev1.Event
		want   []EventRow
	}{
		"only crawl.proxyfleet.io objects, newest first, a member's pool named": {
			events: []*corev1.Event{
				pod,
				event("a", "ProxyPool", "p", "ScaledUp", t0.Add(time.Second)),
				event("a", "Proxy", "p-1", "Ready", t0.Add(2*time.Second)),
				event("b", "CrawlPolicy", "polite", "Invalid", t0),
				series,
			},
			want: []EventRow{
				{Namespace: "a", Kind: "Proxy", Name: "p-1", Pool: "p", Type: "Normal", Reason: "Probed", Message: "Probed p-1", Count: 1, LastMillis: t0.Add(3 * time.Second).UnixMilli()},
				{Namespace: "a", Kind: "Proxy", Name: "p-1", Pool: "p", Type: "Normal", Reason: "Ready", Message: "Ready p-1", Count: 1, LastMillis: t0.Add(2 * time.Second).UnixMilli()},
				{Namespace: "a", Kind: "ProxyPool", Name: "p", Pool: "p", Type: "Normal", Reason: "ScaledUp", Message: "ScaledUp p", Count: 1, LastMillis: t0.Add(time.Second).UnixMilli()},
				{Namespace: "b", Kind: "CrawlPolicy", Name: "polite", Type: "Normal", Reason: "Invalid", Message: "Invalid polite", Count: 1, LastMillis: t0.UnixMilli()},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := eventRows(tc.events, map[objectKey]string{{"a", "p-1"}: "p"})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("eventRows (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEventsAreKeptPerNamespace: a namespace with many events keeps its
// latest EventsPerNamespace and cannot push out another's older ones.
func TestEventsAreKeptPerNamespace(t *testing.T) {
	var events []*corev1.Event
	events = append(events, event("quiet", "Proxy", "q-1", "Ready", t0))
	for i := range 3 * EventsPerNamespace {
		events = append(events, event("noisy", "Proxy", fmt.Sprintf("n-%d", i), "Ready", t0.Add(time.Duration(i+1)*time.Second)))
	}
	got := map[string][]string{}
	for _, r := range eventRows(events, nil) {
		got[r.Namespace] = append(got[r.Namespace], r.Name)
	}
	if len(got["noisy"]) != EventsPerNamespace || got["noisy"][0] != fmt.Sprintf("n-%d", 3*EventsPerNamespace-1) {
		t.Errorf("noisy kept %d events starting %q, want its latest %d", len(got["noisy"]), got["noisy"][:1], EventsPerNamespace)
	}
	if diff := cmp.Diff([]string{"q-1"}, got["quiet"]); diff != "" {
		t.Errorf("quiet's events (-want +got):\n%s", diff)
	}
	visible := Filter(View{Events: eventRows(events, nil)}, func(ns string) bool { return ns == "quiet" })
	if len(visible.Events) != 1 {
		t.Errorf("a viewer of quiet sees %d events, want 1", len(visible.Events))
	}
}
