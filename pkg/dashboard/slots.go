package dashboard

import (
	"errors"
	"sync"
)

// Defaults of the stream slots.
const (
	// DefaultMaxViewers bounds the open streams of a replica.
	DefaultMaxViewers = 100
	// DefaultMaxViewersPerIdentity bounds one identity's open streams (a
	// person's tabs): no identity can take every slot.
	DefaultMaxViewersPerIdentity = 8
	// DefaultViewersKeptForAll is how many slots only a viewer allowed
	// across all namespaces (an administrator) may take: tenants, however
	// many identities they make, cannot lock those out.
	DefaultViewersKeptForAll = 20
)

var (
	// errViewersFull: every slot open to the viewer is taken (503).
	errViewersFull = errors.New("too many open dashboards; retry")
	// errIdentityFull: the viewer's identity holds its share of slots (429).
	errIdentityFull = errors.New("this identity has too many dashboards open; close one")
)

// slots counts the open streams, overall and per identity. A slot is taken
// only after the viewer is known to see something.
type slots struct {
	max, perIdentity, keptForAll int

	mu         sync.Mutex
	open       int
	byIdentity map[string]int
}

func newSlots(max, perIdentity, keptForAll int) *slots {
	if max <= 0 {
		max = DefaultMaxViewers
	}
	if perIdentity <= 0 {
		perIdentity = DefaultMaxViewersPerIdentity
	}
	if keptForAll < 0 {
		keptForAll = 0
	}
	return &slots{max: max, perIdentity: perIdentity, keptForAll: min(keptForAll, max-1), byIdentity: map[string]int{}}
}

// take gives identity a slot; allNamespaces viewers may take the kept ones.
// release gives it back.
func (s *slots) take(identity string, allNamespaces bool) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := s.max
	if !allNamespaces {
		limit -= s.keptForAll
	}
	switch {
	case s.byIdentity[identity] >= s.perIdentity:
		return nil, errIdentityFull
	case s.open >= limit:
		return nil, errViewersFull
	}
	s.open++
	s.byIdentity[identity]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.open--
			if s.byIdentity[identity]--; s.byIdentity[identity] == 0 {
				delete(s.byIdentity, identity)
			}
		})
	}, nil
}
