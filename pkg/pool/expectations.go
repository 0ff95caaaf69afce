package pool

import (
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// expectationTTL bounds how long a write the informer never shows counts:
// after it, the cache is trusted again (a lost watch event, say).
const expectationTTL = time.Minute

type opKind int

const (
	opCreate opKind = iota
	opDrain
	opDelete
)

type pendingOp struct {
	kind     opKind
	at       time.Time
	revision string // of a create
	instance string // of a member's create on a shared instance
}

// expectations remember the pool's own writes until the informer shows
// them, as a ReplicaSet's do: without them a sync right after a create
// would not see the new member and create another, past maxSurge.
type expectations struct {
	mu    sync.Mutex
	pools map[cache.ObjectName]map[string]pendingOp
}

func newExpectations() *expectations {
	return &expectations{pools: map[cache.ObjectName]map[string]pendingOp{}}
}

func (e *expectations) expect(pool cache.ObjectName, member string, op pendingOp) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := e.pools[pool]
	if m == nil {
		m = map[string]pendingOp{}
		e.pools[pool] = m
	}
	m[member] = op
}

func (e *expectations) forget(pool cache.ObjectName, member string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.pools[pool], member)
}

// observe clears what the informer now shows of p.
func (e *expectations) observe(pool cache.ObjectName, p *crawlv1alpha1.Proxy) {
	e.mu.Lock()
	defer e.mu.Unlock()
	op, ok := e.pools[pool][p.Name]
	if !ok {
		return
	}
	_, draining := p.Annotations[crawlv1alpha1.DrainingAnnotation]
	if op.kind == opCreate || (op.kind == opDrain && draining) || (op.kind == opDelete && p.DeletionTimestamp != nil) {
		delete(e.pools[pool], p.Name)
	}
}

func (e *expectations) observeGone(pool cache.ObjectName, member string) {
	e.forget(pool, member)
}

// snapshot returns the live expectations of a pool, dropping expired ones.
func (e *expectations) snapshot(pool cache.ObjectName, now time.Time) map[string]pendingOp {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]pendingOp{}
	for name, op := range e.pools[pool] {
		if now.Sub(op.at) > expectationTTL {
			delete(e.pools[pool], name)
			continue
		}
		out[name] = op
	}
	return out
}

func (e *expectations) any(pool cache.ObjectName) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.pools[pool]) > 0
}
