package dashboard

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

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

// TestCachedEvent: the cache keeps what a row shows, each string within
// its bound, so a tenant's 900 KB message costs a KiB; a row made from the
// cached event is the row of the original, but for the cut message.
func TestCachedEvent(t *testing.T) {
	huge := event("tenant", "Proxy", "noise", "Noisy", t0)
	huge.Message = strings.Repeat("é", 450<<10) // 900 KiB of two-byte characters
	huge.Reason = strings.Repeat("R", 1000)
	huge.Annotations = map[string]string{"padding": strings.Repeat("a", 200<<10)}
	huge.Related = &corev1.ObjectReference{Name: strings.Repeat("n", 1000)}
	huge.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "tenant"}}
	series := event("a", "Proxy", "p-1", "Probed", t0)
	series.Series = &corev1.EventSeries{Count: 7, LastObservedTime: metav1.NewMicroTime(t0.Add(3 * time.Second))}
	series.Source = corev1.EventSource{Component: "proxy-operator", Host: "node-1"}

	for name, e := range map[string]*corev1.Event{"huge": huge, "series": series, "plain": event("a", "ProxyPool", "p", "ScaledUp", t0)} {
		t.Run(name, func(t *testing.T) {
			obj, err := CachedEvent(e.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			kept := obj.(*corev1.Event)
			if kept.Annotations != nil || kept.Related != nil || kept.ManagedFields != nil || kept.Source != (corev1.EventSource{}) {
				t.Errorf("the cached event keeps more than a row shows: %+v", kept.ObjectMeta)
			}
			if n := len(kept.Message) + len(kept.Reason); n > EventMessageBytes+eventReasonBytes {
				t.Errorf("message and reason keep %d bytes, more than their bounds", n)
			}
			want := eventRows([]*corev1.Event{e}, nil)
			for i := range want {
				want[i].Message = clip(want[i].Message, EventMessageBytes)
				want[i].Reason = clip(want[i].Reason, eventReasonBytes)
			}
			if diff := cmp.Diff(want, eventRows([]*corev1.Event{kept}, nil)); diff != "" {
				t.Errorf("rows of the cached event (-want +got):\n%s", diff)
			}
		})
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "a/x", Obj: huge}
	if got, _ := CachedEvent(tomb); got != any(tomb) {
		t.Errorf("a tombstone was changed: %v", got)
	}
}

func TestClip(t *testing.T) {
	tests := map[string]struct {
		s    string
		n    int
		want string
	}{
		"fits":                    {s: "short", n: 5, want: "short"},
		"cut, marked":             {s: "abcdefghij", n: 8, want: "abcde…"},
		"never half a character":  {s: "ééééé", n: 8, want: "éé…"},
		"a bound below the mark":  {s: "abcdef", n: 2, want: "…"},
		"valid UTF-8 after a cut": {s: strings.Repeat("日本", 100), n: 100, want: strings.Repeat("日本", 16) + "…"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := clip(tc.s, tc.n)
			if got != tc.want {
				t.Errorf("clip(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
			if !utf8.ValidString(got) || (len(tc.s) > tc.n && len(got) > max(tc.n, len(truncatedMark))) {
				t.Errorf("clip(%q, %d) = %q: invalid or too long", tc.s, tc.n, got)
			}
		})
	}
}
