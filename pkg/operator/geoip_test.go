package operator_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/operator"
)

// TestGeoIPDatabaseThatDoesNotOpenFailsTheStart: a missing or corrupt
// --geoip-database stops Run at once, with an error naming the flag and the
// file, before anything talks to the API server.
func TestGeoIPDatabaseThatDoesNotOpenFailsTheStart(t *testing.T) {
	corrupt := filepath.Join(t.TempDir(), "corrupt.mmdb")
	if err := os.WriteFile(corrupt, []byte("not a MaxMind DB"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(t.TempDir(), "missing.mmdb"), corrupt} {
		o := operator.DefaultOptions()
		o.GeoIPDatabase = path
		o.Kubeconfig = filepath.Join(t.TempDir(), "no-kubeconfig") // never read
		err := operator.Run(context.Background(), o)
		if err == nil || !strings.Contains(err.Error(), "--geoip-database") || !strings.Contains(err.Error(), path) {
			t.Errorf("Run with --geoip-database=%s: %v; want an error naming the flag and the file", path, err)
		}
	}
}
