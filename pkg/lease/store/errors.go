package store

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors of the store, classified with errors.Is; the HTTP layer maps each
// to one status and code (see docs/api.md).
var (
	// ErrNotLeader: this replica does not lead, so it holds no leases.
	ErrNotLeader = errors.New("this replica is not the leader")
	// ErrUnknownLease: no such lease here: never granted, released, expired,
	// or not a lease ID at all.
	ErrUnknownLease = errors.New("unknown or expired lease")
	// ErrRevoked: the lease ended early because its proxy stopped being
	// Ready, was deleted or replaced, or lost the lease's slot to a lower
	// maxLeases. Acquire another.
	ErrRevoked = errors.New("lease revoked: its proxy is no longer available")
	// ErrSuperseded: after a leader change, a lease granted later on the
	// previous leader holds the same place on the proxy, which proves that
	// this one had ended there (released or revoked).
	ErrSuperseded = errors.New("lease superseded by a later grant on the previous leader")
	// ErrNoneFree: no Ready proxy matching the request has free capacity.
	ErrNoneFree = errors.New("no matching Ready proxy has free capacity")
	// ErrCoolingDown: matching proxies have capacity, but every one of them
	// is cooling down for the request's domain.
	ErrCoolingDown = errors.New("every matching free proxy is cooling down for this domain")
	// ErrRecovering: a new leader grants nothing until every lease the
	// previous leader could have granted has expired or been re-learned.
	ErrRecovering = errors.New("recovering after a leader change: not granting yet")

	// errFiltered: a policy takes the proxy out of an acquire's choice (it
	// is on another tier); never returned.
	errFiltered = errors.New("not among the proxies this acquire may have")
)

// ErrSiteBanning: the domain's site banned as many distinct proxies of
// the namespace within the window as Config.SiteBanProxies: no lease for
// it is granted there until the window passes (sitebans.go). Waiting for
// capacity does not help; it is answered at once.
var ErrSiteBanning = errors.New("the site banned too many distinct proxies of this namespace lately")

// SiteBanningError is ErrSiteBanning with the site, the count and when a
// grant can come again.
type SiteBanningError struct {
	Site       string
	Proxies    int
	Window     time.Duration
	RetryAfter time.Duration
}

func (e *SiteBanningError) Error() string {
	return fmt.Sprintf("%s banned %d distinct proxies of this namespace within %v: no lease for it is granted for %v, so that it burns no more IPs",
		e.Site, e.Proxies, e.Window, e.RetryAfter.Round(time.Second))
}

func (e *SiteBanningError) Unwrap() error { return ErrSiteBanning }

// UnavailableError says that nothing can be granted now, why (ErrNoneFree,
// ErrCoolingDown or ErrRecovering) and when trying again makes sense.
type UnavailableError struct {
	Reason     error
	RetryAfter time.Duration
	// limited: a crawl policy's budget holds the acquire back; rule names
	// the rule, counted when the acquire waits or is refused.
	limited bool
	rule    budgetKey
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%v (retry after %v)", e.Reason, e.RetryAfter)
}

func (e *UnavailableError) Unwrap() error { return e.Reason }

// FieldError is a request that is malformed or out of bounds, naming the
// offending field as the API spells it.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// HorizonError: granting or renewing would promise an expiry beyond the
// horizon this leader has persisted (pkg/lease/server keeps it). The
// caller extends the horizon to Need and tries again.
type HorizonError struct {
	Need time.Time
}

func (e *HorizonError) Error() string {
	return fmt.Sprintf("expiry %v is beyond the persisted horizon", e.Need.Format(time.RFC3339Nano))
}

// ErrTooManyLeases: the caller's identity already holds
// Config.MaxLeasesPerOwner live leases (429). Release one first.
var ErrTooManyLeases = errors.New("this identity holds as many leases as it may")

// OwnerLimitError is ErrTooManyLeases with the limit.
type OwnerLimitError struct {
	Limit int
}

func (e *OwnerLimitError) Error() string {
	return fmt.Sprintf("%v (%d); release one first", ErrTooManyLeases, e.Limit)
}

func (e *OwnerLimitError) Unwrap() error { return ErrTooManyLeases }

// truncate keeps echoed input short in error messages.
func truncate(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// noneInCountry is ErrNoneFree for an acquire that named a country: the
// same answer (503, retry), saying the country, since a country nothing
// leaves from is the likelier cause than a busy fleet.
type noneInCountry struct{ country string }

func (e noneInCountry) Error() string {
	return "no matching Ready proxy with exit country " + e.country + " has free capacity"
}

func (e noneInCountry) Unwrap() error { return ErrNoneFree }

// inCountry words err's ErrNoneFree for an acquire that named country.
func inCountry(err error, country string) error {
	var unavailable *UnavailableError
	if country == "" || !errors.As(err, &unavailable) || unavailable.Reason != ErrNoneFree {
		return err
	}
	withCountry := *unavailable
	withCountry.Reason = noneInCountry{country}
	return &withCountry
}
