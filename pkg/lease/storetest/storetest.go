// Package storetest holds what the lease store's tests and the lease
// server's tests share: a Metrics that records what the store reports, and
// the fixed values their fixtures build on. It imports nothing of the
// store, so that the store's own (internal) tests can use it too; the
// recorder implements store.Metrics and its optional interfaces by their
// method sets.
package storetest

import (
	"bytes"
	"maps"
	"sync"
	"time"
)

// Namespace is the namespace of the fixtures' proxies.
const Namespace = "crawl"

var (
	// T0 is when every fixture clock starts.
	T0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	// Key is a lease ID key of the minimum length.
	Key = bytes.Repeat([]byte("0123456789abcdef"), 2)
)

// Metrics records what a store reports: store.Metrics and StateMetrics.
type Metrics struct {
	mu         sync.Mutex
	acquires   map[string]int
	ends       map[string]int
	active     int
	cooldowns  int
	recovering bool
	// entries and evictions are the StateMetrics, by kind.
	entries, evictions map[string]int
}

// NewMetrics is an empty recorder.
func NewMetrics() *Metrics {
	return &Metrics{acquires: map[string]int{}, ends: map[string]int{}}
}

func (m *Metrics) ObserveAcquire(outcome string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acquires[outcome]++
}

func (m *Metrics) SetActiveLeases(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.active = n
}

func (m *Metrics) ObserveLeaseEnd(end string, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ends[end]++
}

func (m *Metrics) SetCooldowns(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cooldowns = n
}

func (m *Metrics) SetRecovering(r bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recovering = r
}

func (m *Metrics) SetStateEntries(kind string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries == nil {
		m.entries = map[string]int{}
	}
	m.entries[kind] = n
}

func (m *Metrics) ObserveStateEviction(kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.evictions == nil {
		m.evictions = map[string]int{}
	}
	m.evictions[kind]++
}

// Snapshot is what a Metrics recorded, at one moment.
type Snapshot struct {
	Acquires           map[string]int
	Ends               map[string]int
	Active             int
	Cooldowns          int
	Recovering         bool
	Entries, Evictions map[string]int
}

// Snapshot copies what m recorded so far.
func (m *Metrics) Snapshot() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Snapshot{Acquires: maps.Clone(m.acquires), Ends: maps.Clone(m.ends), Active: m.active, Cooldowns: m.cooldowns,
		Recovering: m.recovering, Entries: maps.Clone(m.entries), Evictions: maps.Clone(m.evictions)}
}
