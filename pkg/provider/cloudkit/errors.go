package cloudkit

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// Kind is what a cloud's error means to a provider; a provider maps its
// cloud's error codes to one (Classify) and the kit decides from there.
type Kind int

const (
	// KindTransient: retry with backoff (server errors, timeouts, no answer).
	KindTransient Kind = iota
	// KindCapacity: this place (server type, zone) has no room now; the next
	// place may (WalkPlaces). When every place has none, a quota error:
	// capacity may come back later.
	KindCapacity
	// KindQuota: the account or project is out of quota.
	KindQuota
	// KindRateLimited: the API refused the call for its rate; Error.RetryAfter
	// says when to call again (Gate.Defer).
	KindRateLimited
	// KindNotFound: the resource does not exist (or not yet).
	KindNotFound
	// KindConflict: a unique name is taken: a create made earlier for the
	// same key (adopt it) or a resource changed during the call.
	KindConflict
	// KindPermanent: retrying cannot help (invalid request, no permission).
	KindPermanent
)

var kindNames = [...]string{"transient", "capacity", "quota", "rate-limited", "not-found", "conflict", "permanent"}

func (k Kind) String() string { return kindNames[k] }

// Error is a cloud's error with its Kind. Its text is the cloud's (code and
// message), which never carries a request's content.
type Error struct {
	Kind Kind
	// RetryAfter is how long to wait before the next call, for
	// KindRateLimited; zero when the cloud did not say.
	RetryAfter time.Duration
	Err        error
}

// Classify marks err with kind.
func Classify(kind Kind, err error) error { return &Error{Kind: kind, Err: err} }

// RateLimited marks err as rate-limited, to be retried after retryAfter.
func RateLimited(err error, retryAfter time.Duration) error {
	return &Error{Kind: KindRateLimited, RetryAfter: retryAfter, Err: err}
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// KindOf is err's Kind; KindTransient for an error no provider classified.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindTransient
}

// ProviderError is err with the class the controller retries by
// (provider.Quota, Permanent, Transient; provider.ErrNotFound for
// KindNotFound), wrapped with what was being done.
func ProviderError(doing string, err error) error {
	if err == nil {
		return nil
	}
	err = fmt.Errorf("%s: %w", doing, err)
	switch KindOf(err) {
	case KindQuota, KindCapacity:
		return provider.Quota(err)
	case KindPermanent:
		return provider.Permanent(err)
	case KindNotFound:
		return fmt.Errorf("%w: %w", err, provider.ErrNotFound)
	}
	return provider.Transient(err)
}

// WalkPlaces tries create at each place in order and returns at the first
// that is not a capacity error: the shared launch-path check. A capacity
// error is the only one that moves on, because it is the only one after
// which the cloud made nothing; every other error may hide a made instance
// (a lost answer), which the next try must find under the same key rather
// than beside it. When every place had no capacity, the error is
// KindCapacity and lists each place.
func WalkPlaces(places []string, create func(place string) error) error {
	var capacity []error
	for _, place := range places {
		err := create(place)
		if KindOf(err) != KindCapacity {
			return err
		}
		capacity = append(capacity, fmt.Errorf("%s: %w", place, err))
	}
	return Classify(KindCapacity, fmt.Errorf("no place had capacity (%w)", errors.Join(capacity...)))
}

// RetryAfter is how long a rate-limited answer asks to wait: its
// Retry-After header (seconds), else until reset (the cloud's
// RateLimit-Reset, zero if none), else zero (the gate then waits its
// fallback).
func RetryAfter(header http.Header, reset, now time.Time) time.Duration {
	if s, err := strconv.Atoi(header.Get("Retry-After")); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if !reset.IsZero() && reset.After(now) {
		return reset.Sub(now)
	}
	return 0
}
