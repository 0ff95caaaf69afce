package dashboard

import (
	"cmp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// EventsPerNamespace is how many of a namespace's latest events the view
// keeps. Per namespace, not overall, so that a noisy tenant cannot push a
// quiet one's events off the page of a viewer who sees only the quiet one.
const EventsPerNamespace = 50

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
