package dashboard

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Defaults of HubConfig.
const (
	// DefaultDebounce gathers a burst of informer events (a pool scaling
	// creates and updates many Proxies) into one rebuild, well within the
	// second a change must take to reach a viewer.
	DefaultDebounce = 200 * time.Millisecond
	// DefaultLeaseRefresh is how often the view is rebuilt without an
	// informer event: the lease store tells nobody about grants and
	// releases, so the leases are looked at this often (in memory).
	DefaultLeaseRefresh = time.Second
)

// HubConfig configures a Hub.
type HubConfig struct {
	// Inputs reads the current objects and leases; it must read caches and
	// memory only, never the API server. Required.
	Inputs func() Inputs
	// Debounce and LeaseRefresh default to the constants above.
	Debounce     time.Duration
	LeaseRefresh time.Duration
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

// Hub keeps the current View and tells viewers when it changes. It holds
// one View for all viewers: a viewer filters it when it writes, and a
// viewer that falls behind skips to the latest, so that no viewer ever
// queues more than one View.
//
// While no stream is open it does not rebuild, only marks the View stale,
// and the next Current rebuilds it: a replica nobody looks at pays nothing
// for its dashboard.
type Hub struct {
	inputs       func() Inputs
	debounce     time.Duration
	leaseRefresh time.Duration
	clock        clock.WithTicker
	poke         chan struct{}

	viewers    atomic.Int64
	stale      atomic.Bool
	rebuilding sync.Mutex // one rebuild at a time, from Run or Current

	mu      sync.Mutex
	view    View
	version uint64
	encoded []byte // view as JSON, to tell a change from a rebuild
	changed chan struct{}
}

// NewHub returns a Hub; Run keeps it current.
func NewHub(cfg HubConfig) *Hub {
	h := &Hub{
		inputs: cfg.Inputs, debounce: cfg.Debounce, leaseRefresh: cfg.LeaseRefresh, clock: cfg.Clock,
		poke: make(chan struct{}, 1), changed: make(chan struct{}),
	}
	if h.debounce <= 0 {
		h.debounce = DefaultDebounce
	}
	if h.leaseRefresh <= 0 {
		h.leaseRefresh = DefaultLeaseRefresh
	}
	if h.clock == nil {
		h.clock = clock.RealClock{}
	}
	return h
}

// Poke says that an object changed; it never blocks (informer handlers
// call it).
func (h *Hub) Poke() {
	select {
	case h.poke <- struct{}{}:
	default:
	}
}

// Join counts an open stream until leave is called.
func (h *Hub) Join() (leave func()) {
	h.viewers.Add(1)
	return func() { h.viewers.Add(-1) }
}

// Current is the latest View, its version (0 before the first build), and
// a channel closed when a newer one is published. A View gone stale while
// nobody watched is rebuilt first.
func (h *Hub) Current() (View, uint64, <-chan struct{}) {
	if h.stale.Load() {
		_ = h.rebuild() // the error cannot happen; Run logs it if it does
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.view, h.version, h.changed
}

// Run rebuilds the View after each burst of pokes and every LeaseRefresh,
// publishing it when it differs from the last, until ctx ends.
func (h *Hub) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if err := h.rebuild(); err != nil {
		logger.Error(err, "Building the dashboard's view")
	}
	tick := h.clock.NewTicker(h.leaseRefresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		case <-h.poke:
			select {
			case <-ctx.Done():
				return nil
			case <-h.clock.After(h.debounce):
			}
			select { // pokes during the wait are this rebuild's
			case <-h.poke:
			default:
			}
		}
		if h.viewers.Load() == 0 {
			h.stale.Store(true)
			continue
		}
		if err := h.rebuild(); err != nil {
			logger.Error(err, "Building the dashboard's view")
		}
	}
}

// rebuild builds the View and publishes it if it changed.
func (h *Hub) rebuild() error {
	h.rebuilding.Lock()
	defer h.rebuilding.Unlock()
	h.stale.Store(false) // a change from here on marks it again
	view := Build(h.inputs())
	encoded, err := json.Marshal(view)
	if err != nil { // plain structs of strings and numbers: cannot happen
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.version > 0 && string(encoded) == string(h.encoded) {
		return nil
	}
	h.view, h.encoded = view, encoded
	h.version++
	close(h.changed)
	h.changed = make(chan struct{})
	return nil
}
