package dashboard

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
)

// Who sees what: a viewer's namespaces are decided once per identity and
// kept for AccessTTL, before a stream takes a slot
// (docs/decisions/0420-dashboard-authorizes-per-identity-before-a-slot.md).
// A viewer allowed to list proxies/leases across all namespaces sees all,
// for one review; otherwise only the namespaces where a RoleBinding names
// it (Bindings) are reviewed, at most MaxNamespaceReviews of them per
// identity and AccessTTL, so that an identity bound to no role costs one
// review and is refused.

// Defaults of the access decision.
const (
	// DefaultAccessTTL is how long a viewer's namespaces are kept: the lease
	// API's review cache keeps its answers as long.
	DefaultAccessTTL = auth.DefaultCacheTTL
	// DefaultMaxNamespaceReviews bounds the reviews of one identity's
	// namespaces per AccessTTL.
	DefaultMaxNamespaceReviews = 64
	// accessIdentities bounds the identities whose access is kept.
	accessIdentities = 4096
)

// Bindings says where RBAC may let a user list what it may not list across
// all namespaces: the namespaces of the RoleBindings that name it, one of
// its groups, or its ServiceAccount. synced is false until it knows them.
type Bindings interface {
	Namespaces(user auth.User) (namespaces []string, synced bool)
}

// errNothingVisible: the viewer may list proxies/leases in none of the
// namespaces the dashboard shows (403).
var errNothingVisible = errors.New("this identity may list proxies/leases (crawl.proxyfleet.io) in no namespace the dashboard shows: " +
	"bind it to a role that allows list on proxies/leases in a namespace")

// errBindingsUnknown: the RoleBinding cache has not synced yet (503).
var errBindingsUnknown = errors.New("the operator does not know the RoleBindings yet; retry")

// access decides, per identity, which namespaces a viewer sees.
type access struct {
	authz      auth.Authorizer
	bindings   Bindings // nil: every namespace of the view is a candidate
	ttl        time.Duration
	maxReviews int

	mu     sync.Mutex
	grants *utilcache.LRUExpireCache // identityKey → *grant
}

// grant is what is known of one identity's access, for AccessTTL.
type grant struct {
	mu       sync.Mutex // one identity's reviews go one at a time
	knowsAll bool
	all      bool            // may list across all namespaces
	reviewed map[string]bool // namespace → may list there
	reviews  int             // namespace reviews spent
}

func newAccess(authz auth.Authorizer, bindings Bindings, ttl time.Duration, maxReviews int, clk clock.PassiveClock) *access {
	if ttl <= 0 {
		ttl = DefaultAccessTTL
	}
	if maxReviews <= 0 {
		maxReviews = DefaultMaxNamespaceReviews
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &access{authz: authz, bindings: bindings, ttl: ttl, maxReviews: maxReviews,
		grants: utilcache.NewLRUExpireCacheWithClock(accessIdentities, clk)}
}

// visibility is what one viewer may see of a View.
type visibility struct {
	all      bool
	visible  map[string]bool
	complete bool // false: the review bound left namespaces unreviewed
}

func (v visibility) see(ns string) bool { return v.all || v.visible[ns] }
func (v visibility) nothing() bool      { return !v.all && len(v.visible) == 0 }

// decide returns what user may see of namespaces. It reviews only what its
// grant does not know yet, one identity's reviews one at a time, so that
// concurrent requests of one viewer share them.
func (a *access) decide(ctx context.Context, user auth.User, namespaces []string) (visibility, error) {
	g := a.grantOf(user)
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.knowsAll {
		ok, _, err := a.authz.Authorize(ctx, user, auth.Attributes{Verb: auth.VerbList})
		if err != nil {
			return visibility{}, err
		}
		g.all, g.knowsAll = ok, true
	}
	if g.all {
		return visibility{all: true, complete: true}, nil
	}
	candidate := func(string) bool { return true }
	if a.bindings != nil {
		bound, synced := a.bindings.Namespaces(user)
		if !synced {
			return visibility{}, errBindingsUnknown
		}
		candidate = func(ns string) bool { _, found := slices.BinarySearch(bound, ns); return found }
	}
	v := visibility{visible: map[string]bool{}, complete: true}
	for _, ns := range namespaces {
		if !candidate(ns) {
			continue
		}
		allowed, known := g.reviewed[ns]
		if !known {
			if g.reviews >= a.maxReviews {
				v.complete = false
				continue
			}
			ok, _, err := a.authz.Authorize(ctx, user, auth.Attributes{Verb: auth.VerbList, Namespace: ns})
			if err != nil {
				return visibility{}, err
			}
			g.reviews++
			g.reviewed[ns], allowed = ok, ok
		}
		if allowed {
			v.visible[ns] = true
		}
	}
	return v, nil
}

// grantOf is user's grant, a new one when none is kept or it expired.
func (a *access) grantOf(user auth.User) *grant {
	key := identityKey(user)
	a.mu.Lock()
	defer a.mu.Unlock()
	if v, ok := a.grants.Get(key); ok {
		return v.(*grant)
	}
	g := &grant{reviewed: map[string]bool{}}
	a.grants.Add(key, g, a.ttl)
	return g
}

// identityKey hashes everything a review depends on, each field
// length-prefixed, so that no two users share a key.
func identityKey(u auth.User) [sha256.Size]byte {
	var b strings.Builder
	field := func(s string) { fmt.Fprintf(&b, "%d:%s;", len(s), s) }
	field(u.Name)
	field(u.UID)
	fmt.Fprintf(&b, "#%d;", len(u.Groups))
	for _, g := range slices.Sorted(slices.Values(u.Groups)) {
		field(g)
	}
	fmt.Fprintf(&b, "#%d;", len(u.Extra))
	for _, k := range slices.Sorted(maps.Keys(u.Extra)) {
		field(k)
		fmt.Fprintf(&b, "#%d;", len(u.Extra[k]))
		for _, v := range u.Extra[k] {
			field(v)
		}
	}
	return sha256.Sum256([]byte(b.String()))
}
