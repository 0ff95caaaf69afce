// Package eventually is how tests wait: poll a check until it holds or a
// deadline passes, and fail with the check's last complaint. Tests assert
// what happens, never how fast: a deadline is a bound on a hang, not a
// speed target.
package eventually

import (
	"context"
	"errors"
	"testing"
	"time"
)

// ErrHopeless, wrapped by a check's complaint, says that no wait can fix it
// (the process the check waits for has exited): Poll gives up at once.
var ErrHopeless = errors.New("hopeless")

// Poll calls check every interval until it returns nil or ctx ends. It
// returns nil, or check's last complaint from before ctx ended (a check cut
// off by the deadline complains about the deadline, which says nothing), or
// at once a complaint wrapping ErrHopeless.
func Poll(ctx context.Context, interval time.Duration, check func(ctx context.Context) error) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var last error
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrHopeless) {
			return err
		}
		if last == nil || ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			last = err
		}
		select {
		case <-ctx.Done():
			return last
		case <-ticker.C:
		}
	}
}

// Check polls check every interval and fails t with what and the last
// complaint unless check returns nil within timeout.
func Check(t testing.TB, timeout, interval time.Duration, what string, check func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	if err := Poll(ctx, interval, check); err != nil {
		t.Fatalf("%s: not within %v: %v", what, timeout, err)
	}
}

// Holds adapts a condition that explains itself (ok, or why not) to a check.
func Holds(cond func() (ok bool, why string)) func(ctx context.Context) error {
	return func(context.Context) error {
		if ok, why := cond(); !ok {
			return errors.New(why)
		}
		return nil
	}
}
