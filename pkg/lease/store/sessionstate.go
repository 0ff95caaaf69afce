package store

import (
	"container/list"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/proxyfleet/proxy-operator/pkg/hostrule"
)

// Session state that travels with the IP (docs/sessionstate.md): a lease
// holder stores an opaque blob (a cookie jar) under the lease's proxy and
// domain, and the next grant of that proxy for that domain to the same
// identity hands it back. The key holds the identity that stored it
// (docs/decisions/0211-session-state-belongs-to-its-identity.md), and the
// proxy's UID and instance (ProviderID), so a replaced or recycled proxy
// never hands out its predecessor's state; the identity's ban for the
// domain drops it. Blobs live in the leader's memory, bounded
// (docs/decisions/0210-session-state-cap-counts-entries.md): each entry is
// charged its blob, its key's bytes and a measured fixed overhead, against
// a cap in all, a cap on entries and a cap per identity, least recently
// used evicted first.

// MaxStateSize is the largest blob one (proxy, domain) keeps.
const MaxStateSize = 64 << 10

// Defaults of the caps on the kept state (Config).
const (
	DefaultMaxStateBytes         = 64 << 20
	DefaultMaxStateEntries       = 100_000
	DefaultMaxStateBytesPerOwner = 16 << 20
)

// StateEntryOverhead is what one kept state costs the heap beside its blob
// and its key's bytes: the map slot, the entry, its two list elements.
// Measured, not guessed: growing 5,000 to 70,000 entries and reading
// runtime.MemStats gave 381-482 bytes with Go 1.26 (the map grows in
// steps); TestStateCapCountsWhatTheHeapHolds fails when what the cap
// charges and what the heap holds part by more than 1.5x, and
// BenchmarkSessionStateMemory reports both (docs/benchmarks-runs.md).
const StateEntryOverhead = 432

// StateSessionStates is the StateMetrics kind of the kept blobs.
const StateSessionStates = "session_states"

// StateTooLargeError is a blob over MaxStateSize.
type StateTooLargeError struct{ Size int }

func (e *StateTooLargeError) Error() string {
	return fmt.Sprintf("the session state is %d bytes; at most %d bytes (64 KiB) are kept", e.Size, MaxStateSize)
}

type stateKey struct {
	owner    string // the identity that stored it (lease.owner)
	proxy    ObjectName
	uid      types.UID
	instance string // ProviderID: a new instance is a new IP
	domain   string
}

// cost is what an entry with blob is charged against the caps.
func (k stateKey) cost(blob []byte) int {
	return len(blob) + len(k.owner) + len(k.proxy.Namespace) + len(k.proxy.Name) + len(k.uid) + len(k.instance) + len(k.domain) + StateEntryOverhead
}

type stateEntry struct {
	key  stateKey
	blob []byte
	cost int
	// all is the entry in sessionStates.lru, mine in its owner's.
	all, mine *list.Element
}

// ownerStates are one identity's entries, most recently used first.
type ownerStates struct {
	bytes int
	lru   *list.List
}

// sessionStates is the policy.
type sessionStates struct {
	noDecision
	byKey  map[stateKey]*stateEntry
	lru    *list.List // most recently used first
	owners map[string]*ownerStates
	// bytes is the cost of every entry (stateKey.cost).
	bytes                               int
	maxBytes, maxEntries, maxOwnerBytes int
	metrics                             Metrics
}

func newSessionStates(cfg Config) *sessionStates {
	return &sessionStates{byKey: map[stateKey]*stateEntry{}, lru: list.New(), owners: map[string]*ownerStates{},
		maxBytes: cfg.MaxStateBytes, maxEntries: cfg.MaxStateEntries, maxOwnerBytes: cfg.MaxStateBytesPerOwner, metrics: cfg.Metrics}
}

// stateKeyOf is the key of the state l's holder keeps for l's proxy and domain.
func stateKeyOf(l *lease) stateKey {
	return stateKey{owner: l.owner, proxy: l.proxyKey, uid: l.proxyUID, instance: l.proxy.info.ProviderID, domain: l.domain}
}

// installed: a grant hands the holder the state kept for its proxy and
// domain (Store.stateFor), which makes that entry the most recently used.
func (st *sessionStates) installed(l *lease, how install) {
	if how.grant {
		st.touch(l)
	}
}

func (*sessionStates) ended(*lease)            {}
func (*sessionStates) forget(ObjectName, bool) {}
func (*sessionStates) termEnded()              {}
func (*sessionStates) promoted(time.Duration)  {}

// put keeps blob under k (an empty one drops it), then evicts
// least recently used entries until the caps hold again: first the
// owner's own (its cap), then anyone's (the cap in all and on entries).
// Before the put every cap held, so a put evicts at most one entry plus
// the entries its cost displaces: at most 1 + cost/StateEntryOverhead
// (about 150), never a walk of the whole state.
func (st *sessionStates) put(k stateKey, blob []byte) {
	if e := st.byKey[k]; e != nil {
		st.dropEntry(e)
	}
	if len(blob) > 0 {
		e := &stateEntry{key: k, blob: append([]byte(nil), blob...), cost: k.cost(blob)}
		own := st.owners[k.owner]
		if own == nil {
			own = &ownerStates{lru: list.New()}
			st.owners[k.owner] = own
		}
		e.all, e.mine = st.lru.PushFront(e), own.lru.PushFront(e)
		st.byKey[k] = e
		st.bytes += e.cost
		own.bytes += e.cost
		// The entry just put is never evicted: a cap below one entry
		// keeps that one.
		for own.bytes > st.maxOwnerBytes && own.lru.Back() != e.mine {
			st.evict(own.lru.Back().Value.(*stateEntry))
		}
	}
	for (st.bytes > st.maxBytes || len(st.byKey) > st.maxEntries) && st.lru.Len() > 1 {
		st.evict(st.lru.Back().Value.(*stateEntry))
	}
	setStateEntries(st.metrics, StateSessionStates, len(st.byKey))
}

func (st *sessionStates) evict(e *stateEntry) {
	st.dropEntry(e)
	observeEviction(st.metrics, StateSessionStates)
}

func (st *sessionStates) dropEntry(e *stateEntry) {
	own := st.owners[e.key.owner]
	st.lru.Remove(e.all)
	own.lru.Remove(e.mine)
	delete(st.byKey, e.key)
	st.bytes -= e.cost
	if own.bytes -= e.cost; own.lru.Len() == 0 {
		delete(st.owners, e.key.owner)
	}
}

// blob is a copy of the blob l's owner kept for l's proxy and domain, nil
// for none. It changes nothing: the grant's apply made it the most
// recently used (installed).
func (st *sessionStates) blob(l *lease) []byte {
	if l.domain == "" {
		return nil
	}
	if e := st.byKey[stateKeyOf(l)]; e != nil {
		return append([]byte(nil), e.blob...)
	}
	return nil
}

// touch makes the entry of l's holder for its proxy and domain the most
// recently used.
func (st *sessionStates) touch(l *lease) {
	if l.domain == "" {
		return
	}
	if e := st.byKey[stateKeyOf(l)]; e != nil {
		st.lru.MoveToFront(e.all)
		st.owners[e.key.owner].lru.MoveToFront(e.mine)
	}
}

// drop forgets owner's blob of proxy p for domain (after its ban). Other
// identities' blobs stay: one identity never drops another's.
func (st *sessionStates) drop(owner string, p *proxyState, domain string) {
	k := stateKey{owner: owner, proxy: p.info.Key, uid: p.info.UID, instance: p.info.ProviderID, domain: hostrule.NormalizeDomain(domain)}
	if e := st.byKey[k]; e != nil {
		st.dropEntry(e)
		setStateEntries(st.metrics, StateSessionStates, len(st.byKey))
	}
}
