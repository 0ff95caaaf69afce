package store

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func inCountryOf(c string) proxyOption { return func(p *ProxyInfo) { p.ExitCountry = c } }

// TestAcquireByCountry: an acquire naming a country gets only proxies
// measured to leave from it, with the selector still applied; one for a
// country nothing leaves from is ErrNoneFree saying the country.
func TestAcquireByCountry(t *testing.T) {
	s, _, _ := newTestStore(t, []ProxyInfo{
		newProxy("berlin", inCountryOf("DE"), withMaxLeases(4), withLatency(30)),
		newProxy("munich", inCountryOf("DE"), withMaxLeases(4), withLatency(20), withLabels("tier", "slow")),
		newProxy("boston", inCountryOf("US"), withMaxLeases(4), withLatency(1)),
		newProxy("unknown", withMaxLeases(4), withLatency(0)),
	})
	for _, tc := range []struct {
		name string
		req  AcquireRequest
		want string
	}{
		{"any country: the fastest", AcquireRequest{}, "unknown"},
		{"DE: the fastest German", AcquireRequest{Country: "DE"}, "munich"},
		{"DE without the slow tier", AcquireRequest{Country: "DE", Selector: mustSelector(t, "tier!=slow")}, "berlin"},
		{"US", AcquireRequest{Country: "US"}, "boston"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := acquire(t, s, tc.req)
			defer release(t, s, l)
			if diff := cmp.Diff(tc.want, l.Proxy.Key.Name); diff != "" {
				t.Errorf("leased (-want +got):\n%s", diff)
			}
		})
	}

	listed := map[string]string{}
	for _, p := range s.Proxies(testNamespace, nil) {
		listed[p.Key.Name] = p.ExitCountry
	}
	if diff := cmp.Diff(map[string]string{"berlin": "DE", "munich": "DE", "boston": "US", "unknown": ""}, listed); diff != "" {
		t.Errorf("Proxies' exit countries (-want +got):\n%s", diff)
	}

	_, err := s.Acquire(context.Background(), AcquireRequest{Holder: "w", Country: "FR"})
	var unavailable *UnavailableError
	if !errors.As(err, &unavailable) || !errors.Is(err, ErrNoneFree) || !strings.Contains(err.Error(), "exit country FR") {
		t.Errorf("Acquire(FR) = %v; want ErrNoneFree saying the country", err)
	}
	_, err = s.Acquire(context.Background(), AcquireRequest{Holder: "w", Country: "de"})
	var field *FieldError
	if !errors.As(err, &field) || field.Field != "country" {
		t.Errorf("Acquire(de) = %v; want a FieldError naming country", err)
	}
}
