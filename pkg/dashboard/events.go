package dashboard

import (
	"cmp"
	"slices"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// EventsPerNamespace is how many of a namespace's latest events the view
// keeps. Per namespace, not overall, so that a noisy tenant cannot push a
// quiet one's events off the page of a viewer who sees only the quiet one.
const EventsPerNamespace = 50

// Bounds of what the event cache keeps of each Event (CachedEvent). Any
// tenant may write an Event about a Proxy of its own namespace, which the
// cache's field selector lets through, with a message of up to etcd's
// 1.5 MiB: the bounds keep such an Event to a few KiB in every replica's
// memory and in every viewer's update. EventMessageBytes is the limit the
// events.k8s.io API puts on an event's note; the core API puts none.
const (
	EventMessageBytes = 1024
	eventReasonBytes  = 128 // events.k8s.io's limit on a reason
	eventTypeBytes    = 64
	eventNameBytes    = 253 // a DNS subdomain, the longest object name
)

// truncatedMark ends a string CachedEvent cut short.
const truncatedMark = "…"

// CachedEvent is the event informer's transform: it keeps of an Event only
// what eventRows reads, each string within its bound above, so that the
// cache holds no tenant's megabytes
// (docs/decisions/0421-informers-keep-only-what-they-read.md). It makes a
// new Event (the informer hands it a freshly decoded one, which is
// dropped); anything that is not an Event (a tombstone) passes unchanged.
func CachedEvent(obj any) (any, error) {
	e, ok := obj.(*corev1.Event)
	if !ok {
		return obj, nil
	}
	kept := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name: e.Name, Namespace: e.Namespace, UID: e.UID, ResourceVersion: e.ResourceVersion,
			CreationTimestamp: e.CreationTimestamp,
		},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: clip(e.InvolvedObject.APIVersion, eventNameBytes),
			Kind:       clip(e.InvolvedObject.Kind, eventNameBytes),
			Name:       clip(e.InvolvedObject.Name, eventNameBytes),
		},
		Type:          clip(e.Type, eventTypeBytes),
		Reason:        clip(e.Reason, eventReasonBytes),
		Message:       clip(e.Message, EventMessageBytes),
		Count:         e.Count,
		LastTimestamp: e.LastTimestamp,
		EventTime:     e.EventTime,
	}
	if e.Series != nil {
		kept.Series = &corev1.EventSeries{Count: e.Series.Count, LastObservedTime: e.Series.LastObservedTime}
	}
	return kept, nil
}

// clip is s if it fits in n bytes, else its longest prefix of whole UTF-8
// characters that fits with truncatedMark after it.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(0, n-len(truncatedMark))
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + truncatedMark
}

// EventRow is one Kubernetes event about a Proxy, ProxyPool or CrawlPolicy,
// as `kubectl describe` shows it. Pool is the pool it concerns: the pool
// itself, or a member's pool ("" otherwise).
type EventRow struct {
	Namespace  string `json:"namespace"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Pool       string `json:"pool"`
	Type       string `json:"type"`
	Reason     string `json:"reason"`
	Message    string `json:"message"`
	Count      int32  `json:"count"`
	LastMillis int64  `json:"lastMillis"`
}

// eventRows are the latest EventsPerNamespace events of each namespace
// about objects of crawl.proxyfleet.io, newest first. poolOf names each
// Proxy's pool.
func eventRows(events []*corev1.Event, poolOf map[objectKey]string) []EventRow {
	rows := make([]EventRow, 0, len(events))
	for _, e := range events {
		o := e.InvolvedObject
		if !isCrawlObject(o) {
			continue
		}
		row := EventRow{
			Namespace: e.Namespace, Kind: o.Kind, Name: o.Name, Type: e.Type,
			Reason: e.Reason, Message: e.Message, Count: max(e.Count, 1), LastMillis: lastSeen(e).UnixMilli(),
		}
		switch o.Kind {
		case "ProxyPool":
			row.Pool = o.Name
		case "Proxy":
			row.Pool = poolOf[objectKey{e.Namespace, o.Name}]
		}
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b EventRow) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(b.LastMillis, a.LastMillis),
			cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Reason, b.Reason))
	})
	kept := rows[:0]
	for i, r := range rows {
		if i >= EventsPerNamespace && rows[i-EventsPerNamespace].Namespace == r.Namespace {
			continue // the namespace has its EventsPerNamespace newer ones
		}
		kept = append(kept, r)
	}
	slices.SortStableFunc(kept, func(a, b EventRow) int { return cmp.Compare(b.LastMillis, a.LastMillis) })
	return kept
}

func isCrawlObject(o corev1.ObjectReference) bool {
	return o.APIVersion == crawlv1alpha1.SchemeGroupVersion.String()
}

// lastSeen is when the event last happened: series and events.k8s.io
// recorders fill different fields.
func lastSeen(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	default:
		return e.CreationTimestamp.Time
	}
}
