package replica

import (
	"context"
	"errors"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// A forwarded call's error crosses the peer port as a callError and comes
// back as the store's own error, so that the lease API answers a forwarded
// call exactly as it answers one it ran itself.

type callError struct {
	Kind       string        `json:"kind"`
	Message    string        `json:"message"`
	Field      string        `json:"field,omitempty"`
	Reason     string        `json:"reason,omitempty"`
	RetryAfter time.Duration `json:"retryAfter,omitempty"`
	Need       time.Time     `json:"need,omitempty"`
	Number     int           `json:"number,omitempty"`
	Site       string        `json:"site,omitempty"`
	Window     time.Duration `json:"window,omitempty"`
}

// The store's unavailable reasons, by name, most specific first.
var reasons = []struct {
	name string
	err  error
}{
	{"domainBudgetsFull", store.ErrDomainBudgetsFull},
	{"domainLimited", store.ErrDomainLimited},
	{"coolingDown", store.ErrCoolingDown},
	{"recovering", store.ErrRecovering},
	{"noneFree", store.ErrNoneFree},
}

// The sentinels that come back as themselves.
var sentinels = []struct {
	name string
	err  error
}{
	{"unknownLease", store.ErrUnknownLease},
	{"revoked", store.ErrRevoked},
	{"superseded", store.ErrSuperseded},
	{"notLeader", store.ErrNotLeader},
	{"canceled", context.Canceled},
	{"deadline", context.DeadlineExceeded},
}

func errorOf(err error) *callError {
	var (
		field       *store.FieldError
		tooLarge    *store.StateTooLargeError
		owner       *store.OwnerLimitError
		horizon     *store.HorizonError
		unavailable *store.UnavailableError
		siteBanning *store.SiteBanningError
	)
	c := &callError{Kind: "other", Message: err.Error()}
	switch {
	case errors.As(err, &field):
		c.Kind, c.Field, c.Message = "field", field.Field, field.Message
	case errors.As(err, &tooLarge):
		c.Kind, c.Number = "stateTooLarge", tooLarge.Size
	case errors.As(err, &owner):
		c.Kind, c.Number = "tooManyLeases", owner.Limit
	case errors.As(err, &horizon):
		c.Kind, c.Need = "horizon", horizon.Need
	case errors.As(err, &siteBanning):
		c.Kind, c.Site, c.Number, c.Window, c.RetryAfter = "siteBanning", siteBanning.Site, siteBanning.Proxies, siteBanning.Window, siteBanning.RetryAfter
	case errors.As(err, &unavailable):
		c.Kind, c.RetryAfter, c.Message = "unavailable", unavailable.RetryAfter, unavailable.Reason.Error()
		for _, r := range reasons {
			if errors.Is(err, r.err) {
				c.Reason = r.name
				break
			}
		}
	default:
		for _, s := range sentinels {
			if errors.Is(err, s.err) {
				c.Kind = s.name
				break
			}
		}
	}
	return c
}

func (c *callError) error() error {
	switch c.Kind {
	case "field":
		return &store.FieldError{Field: c.Field, Message: c.Message}
	case "stateTooLarge":
		return &store.StateTooLargeError{Size: c.Number}
	case "tooManyLeases":
		return &store.OwnerLimitError{Limit: c.Number}
	case "horizon":
		return &store.HorizonError{Need: c.Need}
	case "siteBanning":
		return &store.SiteBanningError{Site: c.Site, Proxies: c.Number, Window: c.Window, RetryAfter: c.RetryAfter}
	case "unavailable":
		base := store.ErrNoneFree
		for _, r := range reasons {
			if r.name == c.Reason {
				base = r.err
			}
		}
		return &store.UnavailableError{Reason: worded{base: base, text: c.Message}, RetryAfter: c.RetryAfter}
	}
	for _, s := range sentinels {
		if s.name == c.Kind {
			if c.Message == s.err.Error() {
				return s.err
			}
			return worded{base: s.err, text: c.Message}
		}
	}
	return errors.New(c.Message)
}

// worded is base (for errors.Is) with the leader's words.
type worded struct {
	base error
	text string
}

func (w worded) Error() string { return w.text }
func (w worded) Unwrap() error { return w.base }
