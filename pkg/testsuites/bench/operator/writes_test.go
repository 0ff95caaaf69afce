package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseWrites(t *testing.T) {
	const metrics = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="crawl.proxyfleet.io",resource="proxies",scope="resource",subresource="",verb="POST",version="v1alpha1"} 100
apiserver_request_total{code="200",component="apiserver",dry_run="",group="crawl.proxyfleet.io",resource="proxies",scope="resource",subresource="status",verb="PUT",version="v1alpha1"} 150
apiserver_request_total{code="409",component="apiserver",dry_run="",group="crawl.proxyfleet.io",resource="proxies",scope="resource",subresource="status",verb="PUT",version="v1alpha1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="crawl.proxyfleet.io",resource="proxies",scope="namespace",subresource="",verb="LIST",version="v1alpha1"} 7
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 100
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 30
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="APPLY",version="v1"} 1
# HELP apiserver_request_duration_seconds x
# TYPE apiserver_request_duration_seconds counter
apiserver_request_duration_seconds{verb="PUT"} 9
`
	got, err := parseWrites(strings.NewReader(metrics))
	if err != nil {
		t.Fatal(err)
	}
	want := apiWrites{
		all:      counts{"proxies": 100, "proxies/status": 153, "events": 100, "leases": 30, "configmaps": 1},
		rejected: counts{"proxies/status": 3},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(apiWrites{})); diff != "" {
		t.Errorf("parseWrites (-want +got):\n%s", diff)
	}

	later := apiWrites{
		all:      counts{"proxies": 100, "proxies/status": 160, "events": 100, "leases": 42, "configmaps": 1, "secrets": 1},
		rejected: counts{"proxies/status": 3},
	}
	wantDiff := apiWrites{all: counts{"proxies/status": 7, "leases": 12, "secrets": 1}, rejected: counts{}}
	if diff := cmp.Diff(wantDiff, later.sub(got), cmp.AllowUnexported(apiWrites{})); diff != "" {
		t.Errorf("sub (-want +got):\n%s", diff)
	}
	if got, want := later.all.others(1, "%.0f", "proxies", "proxies/status"), "events 100, leases 42, configmaps 1, secrets 1"; got != want {
		t.Errorf("others = %q, want %q", got, want)
	}
}

func TestFloorSeconds(t *testing.T) {
	for _, tc := range []struct {
		spec     runSpec
		interval time.Duration
		want     float64
	}{
		{runSpec{proxies: 1000, qps: 100, burst: 200}, 30 * time.Second, 30},   // the probe spread bounds it
		{runSpec{proxies: 10000, qps: 100, burst: 200}, 30 * time.Second, 198}, // the QPS bounds it
		{runSpec{proxies: 1000, qps: 5, burst: 10}, 30 * time.Second, 398},
		{runSpec{proxies: 50, qps: 100, burst: 200}, time.Second, 1}, // all writes fit in the burst
	} {
		if got := floorSeconds(tc.spec, tc.interval); got != tc.want {
			t.Errorf("floorSeconds(%+v, %v) = %v, want %v", tc.spec, tc.interval, got, tc.want)
		}
	}
}
