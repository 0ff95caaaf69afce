package health

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// TestProbeReadsExitIP: with ExitIPFromBody a probe through a real proxy
// records the address the target saw; a target that answers anything but
// an IP fails the probe with a message naming the field.
func TestProbeReadsExitIP(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintln(w, host)
	}))
	defer echo.Close()
	notAnIP := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") }))
	defer notAnIP.Close()
	proxy := proxytest.StartInProcess(t, proxytest.Options{Verbosity: 1})

	for _, tc := range []struct {
		name, url  string
		fromBody   bool
		wantOK     bool
		wantExitIP string
		wantClass  string
	}{
		{"echo, asked", echo.URL + "/ip", true, true, "127.0.0.1", ResultSuccess},
		{"echo, not asked", echo.URL + "/ip", false, true, "", ResultSuccess},
		{"not an IP, asked", notAnIP.URL, true, false, "", ResultUnexpectedStatus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Probe(context.Background(), Target{Proxy: proxy.URL(), URL: tc.url, ExpectedStatus: 200, Timeout: 5 * time.Second, ExitIPFromBody: tc.fromBody})
			got := struct {
				OK            bool
				ExitIP, Class string
			}{r.OK, r.ExitIP, r.Class}
			want := struct {
				OK            bool
				ExitIP, Class string
			}{tc.wantOK, tc.wantExitIP, tc.wantClass}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Probe (-want +got):\n%s\nmessage: %s", diff, r.Message)
			}
		})
	}
}

func TestReadExitIP(t *testing.T) {
	for body, want := range map[string]string{
		"203.0.113.7\n":                       "203.0.113.7",
		"  2001:db8::1  ":                     "2001:db8::1",
		"203.0.113.7 extra":                   "",
		"":                                    "",
		"<html>":                              "",
		string(make([]byte, maxExitIPBody+1)): "",
	} {
		if got := readExitIP(strings.NewReader(body)); got != want {
			t.Errorf("readExitIP(%q) = %q, want %q", body, got, want)
		}
	}
}

// TestExitIPChangeIsReported: a healthy proxy whose exit IP moved is worth
// a status write at once; a failed probe or an unchanged IP is not.
func TestExitIPChangeIsReported(t *testing.T) {
	healthy := counters{verdict: verdictHealthy}
	reported := &Verdict{Healthy: true, ExitIP: "127.0.9.1"}
	for _, tc := range []struct {
		name     string
		reported *Verdict
		c        counters
		r        Result
		want     bool
	}{
		{"moved", reported, healthy, Result{OK: true, ExitIP: "127.0.9.2"}, true},
		{"same", reported, healthy, Result{OK: true, ExitIP: "127.0.9.1"}, false},
		{"failed probe", reported, healthy, Result{OK: false}, false},
		{"nothing reported yet", nil, healthy, Result{OK: true, ExitIP: "127.0.9.2"}, false},
		{"reported unhealthy", &Verdict{Healthy: false}, healthy, Result{OK: true, ExitIP: "127.0.9.2"}, false},
		{"country learned", reported, healthy, Result{OK: true, ExitIP: "127.0.9.1", ExitCountry: "DE"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := exitIPChanged(tc.reported, tc.c, tc.r); got != tc.want {
				t.Errorf("exitIPChanged = %v, want %v", got, tc.want)
			}
		})
	}
}
