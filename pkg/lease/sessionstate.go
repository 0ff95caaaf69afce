package lease

import (
	"container/list"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// Session state that travels with the IP (docs/sessionstate.md): a lease
// holder stores an opaque blob (a cookie jar) under the lease's proxy and
// domain, and the next grant of that proxy for that domain hands it back.
// The key holds the proxy's UID and instance (ProviderID), so a replaced or
// recycled proxy never hands out its predecessor's state; a ban for the
// domain drops it. Blobs live in the leader's memory, bounded in bytes,
// least recently used evicted first.

// MaxStateSize is the largest blob one (proxy, domain) keeps.
const MaxStateSize = 64 << 10

// DefaultMaxStateBytes bounds all blobs a leader keeps.
const DefaultMaxStateBytes = 64 << 20

// StateSessionStates is the StateMetrics kind of the kept blobs.
const StateSessionStates = "session_states"

// StateTooLargeError is a blob over MaxStateSize.
type StateTooLargeError struct{ Size int }

func (e *StateTooLargeError) Error() string {
	return fmt.Sprintf("the session state is %d bytes; at most %d bytes (64 KiB) are kept", e.Size, MaxStateSize)
}

type stateKey struct {
	proxy    cache.ObjectName
	uid      types.UID
	instance string // ProviderID: a new instance is a new IP
	domain   string
}

type stateEntry struct {
	key  stateKey
	blob []byte
	elem *list.Element
}

type sessionStates struct {
	byKey    map[stateKey]*stateEntry
	lru      *list.List // most recently used first
	bytes    int
	maxBytes int
}

func newSessionStates(maxBytes int) sessionStates {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxStateBytes
	}
	return sessionStates{byKey: map[stateKey]*stateEntry{}, lru: list.New(), maxBytes: maxBytes}
}

func stateKeyOf(l *lease) stateKey {
	return stateKey{proxy: l.proxyKey, uid: l.proxyUID, instance: l.proxy.info.ProviderID, domain: l.domain}
}

// PutStateAs stores blob under the proxy and domain of owner's live lease
// id (an empty blob drops what is kept). Errors: ErrUnknownLease and the
// like for the ID, a *FieldError when the lease has no domain, a
// *StateTooLargeError.
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
	if !s.leading {
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
// in scope (as DELETE /v1/sessions names them), under their proxies and
// domain (the lease's when domain is ""). It is how a crawler that goes
// through the gateway, and so never sees the lease's ID, keeps its jar.
// ErrUnknownLease when the session holds none.
func (s *Store) PutSessionStateAs(owner, scope, session, domain string, blob []byte) error {
	if len(blob) > MaxStateSize {
		return &StateTooLargeError{Size: len(blob)}
	}
	domain = NormalizeDomain(domain)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked(s.clock.Now())
	if !s.leading {
		return ErrNotLeader
	}
	found := false
	for _, l := range s.leases {
		if l.state != stateLive || l.owner != owner || l.session != session || l.sessionScope != scope {
			continue
		}
		k := stateKeyOf(l)
		if domain != "" {
			k.domain = domain
		}
		if k.domain == "" {
			return &FieldError{Field: "domain", Message: "the session's lease was acquired without a domain: name one"}
		}
		s.putStateLocked(k, blob)
		found = true
	}
	if !found {
		return ErrUnknownLease
	}
	return nil
}

func (s *Store) putStateLocked(k stateKey, blob []byte) {
	st := &s.states
	if e := st.byKey[k]; e != nil {
		st.bytes -= len(e.blob)
		st.lru.Remove(e.elem)
		delete(st.byKey, k)
	}
	if len(blob) > 0 {
		e := &stateEntry{key: k, blob: append([]byte(nil), blob...)}
		e.elem = st.lru.PushFront(e)
		st.byKey[k] = e
		st.bytes += len(blob)
	}
	for st.bytes > st.maxBytes {
		e := st.lru.Back().Value.(*stateEntry)
		st.bytes -= len(e.blob)
		st.lru.Remove(e.elem)
		delete(st.byKey, e.key)
		s.observeEviction(StateSessionStates)
	}
	s.setStateEntries(StateSessionStates, len(st.byKey))
}

// stateLocked is a copy of the blob kept for l's proxy and domain, nil
// for none.
func (s *Store) stateLocked(l *lease) []byte {
	if l.domain == "" {
		return nil
	}
	e := s.states.byKey[stateKeyOf(l)]
	if e == nil {
		return nil
	}
	s.states.lru.MoveToFront(e.elem)
	return append([]byte(nil), e.blob...)
}

// dropStateLocked forgets the blob of proxy p for domain (after a ban).
func (s *Store) dropStateLocked(p *proxyState, domain string) {
	k := stateKey{proxy: p.info.Key, uid: p.info.UID, instance: p.info.ProviderID, domain: NormalizeDomain(domain)}
	if s.states.byKey[k] != nil {
		s.putStateLocked(k, nil)
	}
}

// StateBytes is how many bytes of blobs the store keeps.
func (s *Store) StateBytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.states.bytes
}
