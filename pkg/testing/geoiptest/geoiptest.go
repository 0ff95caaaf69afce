// Package geoiptest writes small GeoIP databases in MaxMind DB format for
// tests, with MaxMind's own writer (github.com/maxmind/mmdbwriter), so that
// the reader meets the format as real databases have it.
package geoiptest

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// WriteCountryDB writes a GeoLite2-Country-shaped database mapping each
// network (CIDR) to an ISO country code and returns its path under
// t.TempDir(). Reserved networks (loopback, private) are allowed: tests'
// proxies leave from 127.0.0.x.
func WriteCountryDB(t testing.TB, countries map[string]string) string {
	t.Helper()
	tree, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: "GeoLite2-Country", IncludeReservedNetworks: true, RecordSize: 24})
	if err != nil {
		t.Fatalf("geoiptest: %v", err)
	}
	for cidr, code := range countries {
		_, network, err := net.ParseCIDR(cidr)
		if err != nil {
			t.Fatalf("geoiptest: %v", err)
		}
		value := mmdbtype.Map{"country": mmdbtype.Map{"iso_code": mmdbtype.String(code)}}
		if err := tree.Insert(network, value); err != nil {
			t.Fatalf("geoiptest: inserting %s: %v", cidr, err)
		}
	}
	path := filepath.Join(t.TempDir(), "country.mmdb")
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("geoiptest: %v", err)
	}
	if _, err := tree.WriteTo(f); err != nil {
		t.Fatalf("geoiptest: writing %s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("geoiptest: %v", err)
	}
	return path
}
