package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestPoolDemand: a pool's three kinds are set together and go with the pool.
func TestPoolDemand(t *testing.T) {
	m := New(testLabels)
	m.SetPoolDemand("crawl", "eu", 8, 2, 1)
	m.SetPoolDemand("crawl", "us", 0, 0, 0)
	m.SetPoolDemand("crawl", "eu", 9, 0, 1)
	m.ForgetPool("crawl", "us")
	want := `
# HELP proxy_operator_pool_lease_demand Lease demand on a ProxyPool by kind: held (slots held on its members), waiting (acquires waiting that a member would serve), refused (distinct holders refused for lack of a free member within the last minute).
# TYPE proxy_operator_pool_lease_demand gauge
proxy_operator_pool_lease_demand{kind="held",namespace="crawl",pool="eu"} 9
proxy_operator_pool_lease_demand{kind="refused",namespace="crawl",pool="eu"} 1
proxy_operator_pool_lease_demand{kind="waiting",namespace="crawl",pool="eu"} 0
`
	if err := testutil.CollectAndCompare(m.poolDemand.demand, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
