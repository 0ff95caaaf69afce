package dashboard

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Defaults of HistoryConfig: an hour of samples, one each 30 s.
const (
	DefaultHistoryInterval = 30 * time.Second
	DefaultHistoryLength   = 120
)

// Sample is one pool at one time, for the pool page's charts. OK and
// Outcomes are status.usage's running totals: the page charts the success
// rate of each interval from their differences.
type Sample struct {
	Millis   int64 `json:"t"`
	Leased   int   `json:"leased"`
	Ready    int32 `json:"ready"`
	OK       int64 `json:"ok"`
	Outcomes int64 `json:"outcomes"`
	// LatencyMillis is the mean probe latency of the Ready members, 0 when
	// none is Ready.
	LatencyMillis int64 `json:"latencyMillis"`
}

// HistoryConfig configures a History.
type HistoryConfig struct {
	// Inputs reads caches and memory, as the Hub's does. Required.
	Inputs func() Inputs
	// Interval and Length default to the constants above.
	Interval time.Duration
	Length   int
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

// History keeps the last Length samples of every pool, taken each
// Interval whether or not anyone looks, so that a page opened at 3 a.m.
// shows the hour before it. A pool's samples go with the pool; its
// memory is bounded by Length samples per existing pool.
type History struct {
	inputs   func() Inputs
	interval time.Duration
	length   int
	clock    clock.WithTicker

	mu    sync.Mutex
	pools map[objectKey][]Sample
}

// NewHistory returns a History; Run fills it.
func NewHistory(cfg HistoryConfig) *History {
	h := &History{inputs: cfg.Inputs, interval: cfg.Interval, length: cfg.Length, clock: cfg.Clock, pools: map[objectKey][]Sample{}}
	if h.interval <= 0 {
		h.interval = DefaultHistoryInterval
	}
	if h.length <= 0 {
		h.length = DefaultHistoryLength
	}
	if h.clock == nil {
		h.clock = clock.RealClock{}
	}
	return h
}

// Interval is the time between two samples.
func (h *History) Interval() time.Duration { return h.interval }

// Run samples now and every Interval until ctx ends.
func (h *History) Run(ctx context.Context) error {
	tick := h.clock.NewTicker(h.interval)
	defer tick.Stop()
	for {
		h.Record(h.clock.Now(), Build(h.inputs()))
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		}
	}
}

// Record adds a sample of each pool of v taken at now, and forgets the
// pools v no longer has.
func (h *History) Record(now time.Time, v View) {
	latency := meanReadyLatency(v.Members)
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := make(map[objectKey]bool, len(v.Pools))
	for _, p := range v.Pools {
		key := objectKey{p.Namespace, p.Name}
		seen[key] = true
		samples := append(h.pools[key], Sample{
			Millis: now.UnixMilli(), Leased: p.Leased, Ready: p.Ready,
			OK: p.OK, Outcomes: p.Outcomes, LatencyMillis: latency[key],
		})
		if over := len(samples) - h.length; over > 0 {
			samples = slices.Delete(samples, 0, over)
		}
		h.pools[key] = samples
	}
	for key := range h.pools {
		if !seen[key] {
			delete(h.pools, key)
		}
	}
}

// Pool is a copy of the pool's samples, oldest first.
func (h *History) Pool(namespace, name string) []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.pools[objectKey{namespace, name}])
}

// meanReadyLatency is each pool's mean latency over its Ready members.
func meanReadyLatency(members []MemberRow) map[objectKey]int64 {
	sum, n := map[objectKey]int64{}, map[objectKey]int64{}
	for _, m := range members {
		if m.Pool == "" || m.Phase != "Ready" || m.LatencyMillis <= 0 {
			continue
		}
		key := objectKey{m.Namespace, m.Pool}
		sum[key] += m.LatencyMillis
		n[key]++
	}
	for key := range sum {
		sum[key] /= n[key]
	}
	return sum
}
