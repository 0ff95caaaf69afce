package store

import (
	"container/list"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
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

type sessionStates struct {
	byKey  map[stateKey]*stateEntry
	lru    *list.List // most recently used first
	owners map[string]*ownerStates
	// bytes is the cost of every entry (stateKey.cost).
	bytes                               int
	maxBytes, maxEntries, maxOwnerBytes int
}

func newSessionStates(cfg Config) sessionStates {
	return sessionStates{byKey: map[stateKey]*stateEntry{}, lru: list.New(), owners: map[string]*ownerStates{},
		maxBytes: cfg.MaxStateBytes, maxEntries: cfg.MaxStateEntries, maxOwnerBytes: cfg.MaxStateBytesPerOwner}
}

func stateKeyOf(l *lease) stateKey {
	return stateKey{owner: l.owner, proxy: l.proxyKey, uid: l.proxyUID, instance: l.proxy.info.ProviderID, domain: l.domain}
}

// PutStateAs stores blob under the proxy and domain of owner's live lease
// id (an empty blob drops what is kept). Errors: ErrUnknownLease and the
// like for the ID, ErrNotLeader when not leading or fenced, a *FieldError
// when the lease has no domain, a *StateTooLargeError.
func (s *Store) PutStateAs(owner, id string, blob []byte) error {
	if len(blob) > MaxStateSize {
		return &StateTooLargeError{Size: len(blob)}
	}
	tok, err := s.decodeOwned(owner, id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.advanceLocked(now)
	if !s.grantingLocked(now) {
		return ErrNotLeader
	}
	l, err := s.findLocked(tok, now)
	if err != nil {
		return err
	}
	if l.domain == "" {
		return &FieldError{Field: "domain", Message: "the lease was acquired without a domain: session state is kept per proxy and domain"}
	}
	s.putStateLocked(stateKeyOf(l), blob)
	return nil
}

// PutSessionStateAs stores blob for the live leases owner's session holds
// in scope (as DELETE /v1/sessions names them), each under its proxy and
// its own domain. domain, when given, must be that domain: state is kept
// only for what a lease is for, so no caller plants a jar for a domain it
// holds no lease for. It is how a crawler that goes through the gateway,
// and so never sees the lease's ID, keeps its jar. ErrUnknownLease when
// the session holds none.
func (s *Store) PutSessionStateAs(owner, scope, session, domain string, blob []byte) error {
	if len(blob) > MaxStateSize {
		return &StateTooLargeError{Size: len(blob)}
	}
	domain = NormalizeDomain(domain)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.advanceLocked(now)
	if !s.grantingLocked(now) {
		return ErrNotLeader
	}
	held, kept := false, false
	for _, l := range s.leases {
		if l.state != stateLive || l.owner != owner || l.session != session || l.sessionScope != scope {
			continue
		}
		held = true
		if l.domain == "" || (domain != "" && domain != l.domain) {
			continue
		}
		s.putStateLocked(stateKeyOf(l), blob)
		kept = true
	}
	switch {
	case !held:
		return ErrUnknownLease
	case !kept && domain == "":
		return &FieldError{Field: "domain", Message: "the session's lease was acquired without a domain: session state is kept per proxy and domain"}
	case !kept:
		return &FieldError{Field: "domain", Message: fmt.Sprintf("the session holds no lease for %q: state is kept only for a lease's own domain", truncate(domain))}
	}
	return nil
}

// putStateLocked keeps blob under k (an empty one drops it), then evicts
// least recently used entries until the caps hold again: first the
// owner's own (its cap), then anyone's (the cap in all and on entries).
// Before the put every cap held, so a put evicts at most one entry plus
// the entries its cost displaces: at most 1 + cost/StateEntryOverhead
// (about 150), never a walk of the whole state.
func (s *Store) putStateLocked(k stateKey, blob []byte) {
	st := &s.states
	if e := st.byKey[k]; e != nil {
		s.dropStateEntryLocked(e)
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
			s.evictStateLocked(own.lru.Back().Value.(*stateEntry))
		}
	}
	for (st.bytes > st.maxBytes || len(st.byKey) > st.maxEntries) && st.lru.Len() > 1 {
		s.evictStateLocked(st.lru.Back().Value.(*stateEntry))
	}
	s.setStateEntries(StateSessionStates, len(st.byKey))
}

func (s *Store) evictStateLocked(e *stateEntry) {
	s.dropStateEntryLocked(e)
	s.observeEviction(StateSessionStates)
}

func (s *Store) dropStateEntryLocked(e *stateEntry) {
	st := &s.states
	own := st.owners[e.key.owner]
	st.lru.Remove(e.all)
	own.lru.Remove(e.mine)
	delete(st.byKey, e.key)
	st.bytes -= e.cost
	if own.bytes -= e.cost; own.lru.Len() == 0 {
		delete(st.owners, e.key.owner)
	}
}

// stateLocked is a copy of the blob l's owner kept for l's proxy and
// domain, nil for none.
func (s *Store) stateLocked(l *lease) []byte {
	if l.domain == "" {
		return nil
	}
	e := s.states.byKey[stateKeyOf(l)]
	if e == nil {
		return nil
	}
	s.states.lru.MoveToFront(e.all)
	s.states.owners[e.key.owner].lru.MoveToFront(e.mine)
	return append([]byte(nil), e.blob...)
}

// dropStateLocked forgets owner's blob of proxy p for domain (after its
// ban). Other identities' blobs stay: one identity never drops another's.
func (s *Store) dropStateLocked(owner string, p *proxyState, domain string) {
	k := stateKey{owner: owner, proxy: p.info.Key, uid: p.info.UID, instance: p.info.ProviderID, domain: NormalizeDomain(domain)}
	if e := s.states.byKey[k]; e != nil {
		s.dropStateEntryLocked(e)
		s.setStateEntries(StateSessionStates, len(s.states.byKey))
	}
}

// StateBytes is what the kept state is charged against
// --lease-max-state-bytes: blobs, keys and StateEntryOverhead per entry.
func (s *Store) StateBytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.states.bytes
}

// StateEntries is how many blobs the store keeps.
func (s *Store) StateEntries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.states.byKey)
}
