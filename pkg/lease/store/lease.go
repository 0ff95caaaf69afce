package store

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The store's record of a lease, and the heap of leases by expiry.

type leaseState int

const (
	stateLive leaseState = iota
	// Tombstones stay until the lease's expiry so that its ID gets a
	// precise answer: revoked (410), superseded (409), or released (404,
	// kept only for leases re-learned from a previous leader, whose IDs
	// could otherwise be re-learned again).
	stateRevoked
	stateSuperseded
	stateReleased
)

type lease struct {
	key   leaseKey
	state leaseState
	// proxy is set while the lease is live.
	proxy    *proxyState
	proxyKey ObjectName
	proxyUID types.UID
	slot     int32
	holder   string
	// owner is the identity that acquired it: only it may renew, release or read it.
	owner   string
	session string
	// sessionScope is the namespace of the acquire: sessions are per namespace.
	sessionScope string
	domain       string
	grantedAt    time.Time
	expiresAt    time.Time
	ttl          time.Duration
	urlHash      uint64
	// budget is the crawl policy budget the live lease is charged to, nil
	// for none (budgets.go).
	budget *budget
	// readySince is the proxy's ReadySince at the grant.
	readySince time.Time
	// requestID is the acquire's that granted it (requests.go).
	requestID string
	// reportedOK and reportedBytes sum the holder's reports on the live
	// lease, which its life bounds (Report).
	reportedOK, reportedBytes int64
	index                     int // in leaseHeap
}

// leaseOf is the lease a token describes, not yet installed.
func leaseOf(t token) *lease {
	return &lease{
		key:          t.key,
		proxyKey:     t.proxy,
		proxyUID:     t.proxyUID,
		slot:         t.slot,
		holder:       t.holder,
		owner:        t.owner,
		session:      t.session,
		sessionScope: t.sessionScope,
		domain:       t.domain,
		grantedAt:    t.grantedAt,
		expiresAt:    t.expiresAt,
		ttl:          t.ttl,
		urlHash:      t.urlHash,
		readySince:   t.readySince,
	}
}

// tokenOf is what l's ID encodes.
func tokenOf(l *lease) token {
	return token{
		key: l.key, slot: l.slot, grantedAt: l.grantedAt, expiresAt: l.expiresAt, ttl: l.ttl, urlHash: l.urlHash, readySince: l.readySince,
		proxy: l.proxyKey, proxyUID: l.proxyUID, holder: l.holder, domain: l.domain, owner: l.owner,
		session: l.session, sessionScope: l.sessionScope,
	}
}

// leaseHeap orders leases (live and tombstones) by expiry.
type leaseHeap []*lease

func (h leaseHeap) Len() int { return len(h) }

func (h leaseHeap) Less(i, j int) bool { return h[i].expiresAt.Before(h[j].expiresAt) }

func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *leaseHeap) Push(x any) {
	l := x.(*lease)
	l.index = len(*h)
	*h = append(*h, l)
}

func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.index = -1
	return l
}
