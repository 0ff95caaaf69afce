package replica

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// TestForwardedErrorsComeBackAsTheStoresOwn: every error the store answers
// a lease call with crosses the peer port and comes back with its message,
// its sentinel and its type's fields, so that the lease API answers a
// forwarded call as it answers one it ran itself (a site-ban refusal that
// came back as a bare error was answered 500 Internal, not 429).
func TestForwardedErrorsComeBackAsTheStoresOwn(t *testing.T) {
	need := time.Date(2026, 12, 8, 1, 2, 3, 4, time.UTC)
	for name, tc := range map[string]struct {
		err  error
		is   error // the sentinel it must still be, if any
		want any   // the typed error it must still be, if any
	}{
		"unknown lease":   {err: store.ErrUnknownLease, is: store.ErrUnknownLease},
		"revoked":         {err: store.ErrRevoked, is: store.ErrRevoked},
		"superseded":      {err: store.ErrSuperseded, is: store.ErrSuperseded},
		"not leader":      {err: fmt.Errorf("%w: stepping down", store.ErrNotLeader), is: store.ErrNotLeader},
		"canceled":        {err: context.Canceled, is: context.Canceled},
		"field":           {err: &store.FieldError{Field: "ttl", Message: "must be at least 1s"}, want: &store.FieldError{Field: "ttl", Message: "must be at least 1s"}},
		"state too large": {err: &store.StateTooLargeError{Size: 70000}, want: &store.StateTooLargeError{Size: 70000}},
		"too many leases": {err: &store.OwnerLimitError{Limit: 8}, is: store.ErrTooManyLeases, want: &store.OwnerLimitError{Limit: 8}},
		"horizon":         {err: &store.HorizonError{Need: need}, want: &store.HorizonError{Need: need}},
		"cooling down": {
			err: &store.UnavailableError{Reason: store.ErrCoolingDown, RetryAfter: 7 * time.Second},
			is:  store.ErrCoolingDown,
		},
		"site banning": {
			err:  &store.SiteBanningError{Site: "shop.example", Proxies: 5, Window: 10 * time.Minute, RetryAfter: 9 * time.Minute},
			is:   store.ErrSiteBanning,
			want: &store.SiteBanningError{Site: "shop.example", Proxies: 5, Window: 10 * time.Minute, RetryAfter: 9 * time.Minute},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := errorOf(tc.err).error()
			if got.Error() != tc.err.Error() {
				t.Errorf("message %q, want %q", got.Error(), tc.err.Error())
			}
			if tc.is != nil && !errors.Is(got, tc.is) {
				t.Errorf("%v is not %v any more", got, tc.is)
			}
			if tc.want != nil {
				typed := reflect.New(reflect.TypeOf(tc.want))
				if !errors.As(got, typed.Interface()) {
					t.Fatalf("%v is not a %T any more", got, tc.want)
				}
				if diff := cmp.Diff(tc.want, typed.Elem().Interface()); diff != "" {
					t.Errorf("fields (-want +got):\n%s", diff)
				}
			}
		})
	}
}
