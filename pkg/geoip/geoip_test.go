package geoip_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/geoip"
	"github.com/proxyfleet/proxy-operator/pkg/testing/geoiptest"
)

// TestCountry reads a database written by MaxMind's own writer.
func TestCountry(t *testing.T) {
	path := geoiptest.WriteCountryDB(t, map[string]string{
		"127.0.9.0/24":    "DE",
		"127.0.10.0/24":   "us",
		"203.0.113.0/24":  "FR",
		"2001:db8::/32":   "JP",
		"198.51.100.0/24": "Germany", // not a code: no answer
	})
	db, err := geoip.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got := map[string]string{}
	for _, ip := range []string{"127.0.9.1", "127.0.10.200", "203.0.113.7", "::ffff:203.0.113.7", "2001:db8::1", "198.51.100.1", "192.0.2.1", "not an ip", ""} {
		got[ip] = db.Country(ip)
	}
	want := map[string]string{
		"127.0.9.1": "DE", "127.0.10.200": "US", "203.0.113.7": "FR", "::ffff:203.0.113.7": "FR", "2001:db8::1": "JP",
		"198.51.100.1": "", "192.0.2.1": "", "not an ip": "", "": "",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Country (-want +got):\n%s", diff)
	}
	if db.DatabaseType() != "GeoLite2-Country" {
		t.Errorf("DatabaseType = %q", db.DatabaseType())
	}
}

// TestOpenFailsOnABadFile: a missing or corrupt file fails at Open.
func TestOpenFailsOnABadFile(t *testing.T) {
	corrupt := filepath.Join(t.TempDir(), "corrupt.mmdb")
	if err := os.WriteFile(corrupt, []byte("not a MaxMind DB"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(t.TempDir(), "missing.mmdb"), corrupt} {
		if db, err := geoip.Open(path); err == nil {
			db.Close()
			t.Errorf("Open(%s) succeeded", path)
		}
	}
}

// BenchmarkCountry is one lookup, the cost a GeoIP database adds to a
// probe that learns an exit IP.
func BenchmarkCountry(b *testing.B) {
	countries := map[string]string{}
	for i := range 200 {
		countries[fmt.Sprintf("10.%d.0.0/16", i)] = []string{"DE", "US", "FR", "NL"}[i%4]
	}
	db, err := geoip.Open(geoiptest.WriteCountryDB(b, countries))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	b.ReportAllocs()
	for b.Loop() {
		if db.Country("10.121.4.5") != "US" {
			b.Fatal("wrong country")
		}
	}
}
