package dashboard

import (
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkRebuild10000: what the hub does once per burst of changes and
// once a second for the leases: Build the view of 10,000 proxies in 50
// pools (1,000 leases) and encode it to tell a change.
func BenchmarkRebuild10000(b *testing.B) {
	in := Inputs{LeasesKnown: true}
	for p := range 50 {
		name := fmt.Sprintf("pool-%02d", p)
		in.Pools = append(in.Pools, pool("bench", name, 200))
		for m := range 200 {
			in.Proxies = append(in.Proxies, member("bench", fmt.Sprintf("%s-%04d", name, m), name))
			if m%10 == 0 {
				in.Leases = append(in.Leases, Lease{Namespace: "bench", Proxy: fmt.Sprintf("%s-%04d", name, m), Holder: "crawler"})
			}
		}
	}
	b.ReportAllocs()
	var size int
	for b.Loop() {
		encoded, err := json.Marshal(Build(in))
		if err != nil {
			b.Fatal(err)
		}
		size = len(encoded)
	}
	b.ReportMetric(float64(size)/(1<<20), "view-MB")
}
