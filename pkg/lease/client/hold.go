package client

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// releaseTimeout bounds the release at the end of Hold, which runs even
// when the caller's context has ended.
const releaseTimeout = 10 * time.Second

// BannedError says that a domain banned the proxy. A Hold function returns
// it (or an error wrapping it) to release the lease as banned.
type BannedError struct {
	// Domain is the domain that banned the proxy; "" means the domain the
	// lease was acquired with.
	Domain string
}

func (e *BannedError) Error() string {
	if e.Domain == "" {
		return "the proxy is banned by the lease's domain"
	}
	return "the proxy is banned by " + e.Domain
}

// Banned returns a *BannedError for domain.
func Banned(domain string) error { return &BannedError{Domain: domain} }

// Hold acquires a lease, runs fn with it and keeps it renewed every third of
// its TTL while fn runs. When fn returns, Hold releases the lease with the
// outcome fn's error implies: ok for nil, banned for a *BannedError, error
// otherwise; and returns fn's error. A renewal's fresh credentials (a proxy
// that checks lease credentials signs them for the lease's new end) reach
// fn through the lease's ProxyURL and ProxyFunc, with nothing to do.
//
// If the lease is lost while fn runs (revoked, superseded, or not renewable
// before it expired), fn's context is canceled with the loss as its cause,
// and Hold returns an error that matches ErrLeaseLost once fn has returned.
// Transient renewal failures are retried until the lease's expiry.
func (c *Client) Hold(ctx context.Context, req AcquireRequest, fn func(ctx context.Context, l Lease) error) error {
	l, err := c.Acquire(ctx, req)
	if err != nil {
		return err
	}
	l.latest = &latestCredentials{creds: l.Credentials}
	holdCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- fn(holdCtx, *l) }()

	current := *l
	interval := max(current.TTL/3, 10*time.Millisecond)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	var lost error
	for {
		select {
		case fnErr := <-done:
			if lost != nil {
				return errors.Join(lost, fnErr)
			}
			return c.finish(ctx, current, fnErr)
		case <-timer.C:
			renewed, err := c.Renew(holdCtx, current.ID, 0)
			switch {
			case err == nil:
				current.ID, current.ExpiresAt = renewed.ID, renewed.ExpiresAt
				if renewed.Credentials != nil {
					current.latest.set(renewed.Credentials)
				}
				timer.Reset(interval)
			case errors.Is(err, ErrLeaseLost):
				lost = err
				cancel(lost)
			case holdCtx.Err() != nil:
				// The caller is done; fn is returning, then we release.
			default:
				left := time.Until(current.ExpiresAt)
				if left <= 0 {
					lost = fmt.Errorf("%w: not renewed before it expired: %w", ErrLeaseLost, err)
					cancel(lost)
					continue
				}
				timer.Reset(min(interval, time.Second, left/2+time.Millisecond))
			}
		}
	}
}

// finish releases the lease with the outcome of fnErr and returns fnErr, or
// the release's error when fn succeeded.
func (c *Client) finish(ctx context.Context, l Lease, fnErr error) error {
	outcome, domain := OutcomeOK, ""
	var banned *BannedError
	switch {
	case errors.As(fnErr, &banned):
		outcome, domain = OutcomeBanned, banned.Domain
	case fnErr != nil:
		outcome = OutcomeError
	}
	releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	err := c.Release(releaseCtx, l.ID, outcome, domain)
	if fnErr != nil {
		return fnErr
	}
	if errors.Is(err, ErrLeaseLost) {
		// It expired or was revoked just now: nothing left to release.
		return nil
	}
	return err
}
