package operator

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/geoip"
	"github.com/proxyfleet/proxy-operator/pkg/health"
)

// openGeoIP opens the --geoip-database file, or returns nil without one.
// A file that does not open fails the start (the user asked for countries
// and would get none); it stays open, memory-mapped, for the process's
// life.
func openGeoIP(ctx context.Context, path string) (health.CountryLookup, error) {
	if path == "" {
		return nil, nil
	}
	db, err := geoip.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--geoip-database: cannot open %s as a MaxMind DB file: %w", path, err)
	}
	klog.FromContext(ctx).Info("Opened the GeoIP database", "path", path, "type", db.DatabaseType())
	return db, nil
}
