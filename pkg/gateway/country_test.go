package gateway_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCountryTermLeavesFromThatCountry: of two upstreams, one leaving from
// DE and one from US, every request with +country-de leaves through the DE
// one (rotating: a new lease each time; each upstream has 8 slots, so the
// US one is always free too), and +country-us through the US one; a
// country nothing leaves from is a 503 like any other with nothing free,
// saying the country, and a malformed term a 400 naming it.
func TestCountryTermLeavesFromThatCountry(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprint(w, host)
	}))
	defer echo.Close()
	u := startUnitWith(t, unitOptions{leaveFrom: []string{"127.0.8.1", "127.0.8.2"}, countries: []string{"DE", "US"}, maxLeases: 8}, "berlin", "boston")

	for _, tc := range []struct{ username, exit string }{
		{"ns-crawl+country-de", "127.0.8.1"},
		{"country-DE", "127.0.8.1"},
		{"ns-crawl+country-us", "127.0.8.2"},
	} {
		for i := range 6 {
			status, body := u.get(t, tc.username, echo.URL+"/ip")
			if status != http.StatusOK || body != tc.exit {
				t.Errorf("%s, request %d: %d %q, want 200 from %s", tc.username, i, status, body, tc.exit)
			}
		}
	}
	if status, body := u.get(t, "ns-crawl+country-fr", echo.URL+"/ip"); status != http.StatusServiceUnavailable || !strings.Contains(body, "exit country FR") {
		t.Errorf("country-fr: %d %q, want 503 saying the country", status, body)
	}
	if status, body := u.get(t, "ns-crawl+country-deu", echo.URL+"/ip"); status != http.StatusBadRequest || !strings.Contains(body, "country-deu") {
		t.Errorf("country-deu: %d %q, want 400 naming the term", status, body)
	}
}
