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

	"github.com/proxyfleet/proxy-operator/pkg/geoip"
	"github.com/proxyfleet/proxy-operator/pkg/testing/geoiptest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

func TestReadExitInfo(t *testing.T) {
	ipinfo := ExitInfoFields{}
	nested := ExitInfoFields{IPField: "query", CountryField: "location.country_code"}
	for _, tc := range []struct {
		name, body          string
		fields              ExitInfoFields
		wantIP, wantCountry string
	}{
		{"ipinfo", `{"ip":"203.0.113.7","city":"Berlin","country":"DE","org":"AS1 x"}`, ipinfo, "203.0.113.7", "DE"},
		{"lower case country", `{"ip":"2001:db8::1","country":"de"}`, ipinfo, "2001:db8::1", "DE"},
		{"no country", `{"ip":"203.0.113.7"}`, ipinfo, "203.0.113.7", ""},
		{"country is a name", `{"ip":"203.0.113.7","country":"Germany"}`, ipinfo, "203.0.113.7", ""},
		{"country not a string", `{"ip":"203.0.113.7","country":49}`, ipinfo, "203.0.113.7", ""},
		{"nested paths", `{"query":"203.0.113.7","location":{"country_code":"fr"}}`, nested, "203.0.113.7", "FR"},
		{"path through a non-object", `{"query":"203.0.113.7","location":"FR"}`, nested, "203.0.113.7", ""},
		{"ip not an address", `{"ip":"localhost","country":"DE"}`, ipinfo, "", "DE"},
		{"not JSON", `203.0.113.7`, ipinfo, "", ""},
		{"JSON array", `["203.0.113.7"]`, ipinfo, "", ""},
		{"too long", `{"ip":"203.0.113.7","pad":"` + strings.Repeat("x", maxExitInfoBody) + `"}`, ipinfo, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ip, country := readExitInfo(strings.NewReader(tc.body), tc.fields)
			if diff := cmp.Diff([2]string{tc.wantIP, tc.wantCountry}, [2]string{ip, country}); diff != "" {
				t.Errorf("readExitInfo (-want +got):\n%s", diff)
			}
		})
	}
}

type countries map[string]string

func (c countries) Country(ip string) string { return c[ip] }

// TestResolveExitCountry: the echo's country first, else the database's.
func TestResolveExitCountry(t *testing.T) {
	geo := countries{"203.0.113.7": "FR"}
	for _, tc := range []struct {
		name string
		r    Result
		geo  CountryLookup
		want string
	}{
		{"echo answered", Result{OK: true, ExitIP: "203.0.113.7", ExitCountry: "DE"}, geo, "DE"},
		{"database", Result{OK: true, ExitIP: "203.0.113.7"}, geo, "FR"},
		{"database does not know", Result{OK: true, ExitIP: "198.51.100.1"}, geo, ""},
		{"no database", Result{OK: true, ExitIP: "203.0.113.7"}, nil, ""},
		{"no exit IP", Result{OK: true}, geo, ""},
		{"failed probe", Result{OK: false, ExitIP: "203.0.113.7", ExitCountry: "DE"}, geo, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := resolveExitCountry(tc.r, tc.geo); got != tc.want {
				t.Errorf("resolveExitCountry = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNormalizeCountry(t *testing.T) {
	got := map[string]string{}
	for _, s := range []string{"DE", "de", " us ", "D", "DEU", "D1", "ßa", ""} {
		got[s] = NormalizeCountry(s)
	}
	want := map[string]string{"DE": "DE", "de": "DE", " us ": "US", "D": "", "DEU": "", "D1": "", "ßa": "", "": ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NormalizeCountry (-want +got):\n%s", diff)
	}
}

// TestProbeReadsExitInfo: a probe through a real proxy reads the exit IP and
// country from a JSON echo; an answer without the IP member fails the probe
// naming the field; the engine's GeoIP database (a real MaxMind DB file)
// fills the country the echo does not name.
func TestProbeReadsExitInfo(t *testing.T) {
	echo := func(country string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"ip":%q,"country":%q,"loc":"52.5,13.4"}`, host, country)
		}))
	}
	withCountry, withoutCountry := echo("de"), echo("")
	defer withCountry.Close()
	defer withoutCountry.Close()
	noIP := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"addr":"127.0.0.1"}`) }))
	defer noIP.Close()
	db, err := geoip.Open(geoiptest.WriteCountryDB(t, map[string]string{"127.0.0.0/8": "US"}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	proxy := proxytest.StartInProcess(t, proxytest.Options{Verbosity: 1})

	type outcome struct {
		OK                         bool
		ExitIP, ExitCountry, Class string
	}
	for _, tc := range []struct {
		name string
		url  string
		geo  CountryLookup
		want outcome
	}{
		{"echo names the country", withCountry.URL + "/json", db, outcome{true, "127.0.0.1", "DE", ResultSuccess}},
		{"database names it", withoutCountry.URL + "/json", db, outcome{true, "127.0.0.1", "US", ResultSuccess}},
		{"nobody names it", withoutCountry.URL + "/json", nil, outcome{true, "127.0.0.1", "", ResultSuccess}},
		{"no IP member", noIP.URL, db, outcome{false, "", "", ResultUnexpectedStatus}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Probe(context.Background(), Target{Proxy: proxy.URL(), URL: tc.url, ExpectedStatus: 200, Timeout: 5 * time.Second, ExitInfo: &ExitInfoFields{}})
			r.ExitCountry = resolveExitCountry(r, tc.geo)
			if diff := cmp.Diff(tc.want, outcome{r.OK, r.ExitIP, r.ExitCountry, r.Class}); diff != "" {
				t.Errorf("Probe (-want +got):\n%s\nmessage: %s", diff, r.Message)
			}
			if !tc.want.OK && !strings.Contains(r.Message, "spec.healthCheck.exitInfo.ipField") {
				t.Errorf("message %q does not name spec.healthCheck.exitInfo.ipField", r.Message)
			}
		})
	}
}

// BenchmarkReadExitInfo is the cost an exitInfo check adds to a probe:
// decoding ipinfo's answer (~300 bytes).
func BenchmarkReadExitInfo(b *testing.B) {
	body := `{"ip":"203.0.113.7","hostname":"static.7.113.0.203.example.net","city":"Berlin","region":"Berlin","country":"DE",` +
		`"loc":"52.5244,13.4105","org":"AS64500 Example GmbH","postal":"10178","timezone":"Europe/Berlin","readme":"https://ipinfo.io/missingauth"}`
	b.ReportAllocs()
	for b.Loop() {
		if ip, country := readExitInfo(strings.NewReader(body), ExitInfoFields{}); ip == "" || country != "DE" {
			b.Fatal(ip, country)
		}
	}
}
