package eventually_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

func TestPoll(t *testing.T) {
	tests := map[string]struct {
		check     func(calls int) error
		wantErr   string
		wantCalls int
	}{
		"holds at once":         {check: func(int) error { return nil }, wantCalls: 1},
		"holds on the third":    {check: func(n int) error { return failUntil(n, 3) }, wantCalls: 3},
		"hopeless stops it":     {check: func(n int) error { return fmt.Errorf("%w: exited", eventually.ErrHopeless) }, wantErr: "hopeless: exited", wantCalls: 1},
		"never: last complaint": {check: func(n int) error { return errors.New("not yet") }, wantErr: "not yet"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			calls := 0
			err := eventually.Poll(ctx, time.Millisecond, func(context.Context) error { calls++; return tc.check(calls) })
			if got := fmt.Sprint(err); (err == nil) != (tc.wantErr == "") || err != nil && got != tc.wantErr {
				t.Errorf("Poll = %v, want %q", err, tc.wantErr)
			}
			if tc.wantCalls > 0 && calls != tc.wantCalls {
				t.Errorf("%d calls, want %d", calls, tc.wantCalls)
			}
		})
	}
}

func failUntil(n, ok int) error {
	if n < ok {
		return errors.New("not yet")
	}
	return nil
}
