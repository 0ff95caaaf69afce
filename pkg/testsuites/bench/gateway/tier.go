package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// tierReplicas is how many `proxy-operator gateway` processes the tier
// mode starts: one carries the standard measurements, both the one-against-
// two table.
const tierReplicas = 2

// gatewayWords says in the report what serves the gateway.
var gatewayWords = fmt.Sprintf("cmd/proxy-operator with --lease-auth=none (the lease API) and %d `proxy-operator gateway` replicas "+
	"calling it over HTTP for each lease (the tier, as installed; the tables use the first replica, CPU counts both)", tierReplicas)

// startGateways starts the operator (the lease API) and the tier's
// replicas beside it.
func startGateways(s *setup, operatorBin, dir, kubeconfig string) (*child, error) {
	ports := make([]int, 2+2*tierReplicas)
	for i := range ports {
		var err error
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	s.operatorMetrics = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	leaseAddr := fmt.Sprintf("127.0.0.1:%d", ports[1])
	op, err := start("proxy-operator", operatorBin, filepath.Join(dir, "operator.log"), []string{"KUBECONFIG=", "POD_NAME=", "POD_NAMESPACE="},
		fmt.Sprintf("--metrics-addr=127.0.0.1:%d", ports[0]), "--lease-addr="+leaseAddr,
		"--kubeconfig="+kubeconfig, "--namespace="+namespace, "--leader-elect-namespace="+namespace, "--lease-auth=none",
		"--providers=local", "--local-state-dir="+filepath.Join(dir, "instances"))
	if err != nil {
		return nil, err
	}
	for i := range tierReplicas {
		addr := fmt.Sprintf("127.0.0.1:%d", ports[2+2*i])
		r, err := start(fmt.Sprintf("gateway-%d", i), operatorBin, filepath.Join(dir, fmt.Sprintf("gateway-%d.log", i)), nil,
			"gateway", "--listen="+addr, fmt.Sprintf("--metrics-addr=127.0.0.1:%d", ports[3+2*i]),
			"--lease-url=http://"+leaseAddr, "--lease-auth=none", "--drain-delay=0s", "--kubeconfig="+kubeconfig)
		if err != nil {
			op.stop()
			for _, started := range s.replicas {
				started.stop()
			}
			return nil, err
		}
		s.replicas, s.replicaAddrs = append(s.replicas, r), append(s.replicaAddrs, addr)
	}
	s.gateway = s.replicaAddrs[0]
	return op, nil
}

// replicaRun is one measurement of new tunnels through n replicas.
type replicaRun struct {
	tunnels float64 // per second
	count   float64
	errors  int64
	cpu     cpuSpent
	// acquires is how many leases the lease API granted meanwhile.
	acquires float64
}

// measureReplicas: new tunnels (one request each) with the clients on one
// replica, then split over both, alternating rounds; CPU per 1,000 tunnels
// of the gateways and of the lease API, and lease API calls per tunnel.
func (s *setup) measureReplicas(ctx context.Context) (string, error) {
	runs := map[int][]replicaRun{}
	for round := range s.o.rounds {
		order := []int{1, tierReplicas}
		if round%2 == 1 {
			order = []int{tierReplicas, 1}
		}
		for _, n := range order {
			r, err := s.measureOn(ctx, s.replicaAddrs[:n])
			if err != nil {
				return "", err
			}
			runs[n] = append(runs[n], r)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "One replica against %d, every process on every core, new CONNECT tunnels (one request each), %d clients split evenly; "+
		"CPU per 1,000 tunnels (medians of %d rounds):\n\n", tierReplicas, s.o.clients, s.o.rounds)
	b.WriteString("| replicas | tunnels/s | gateways | lease API | gateways + lease API | lease grants per tunnel | failed |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	perK := func(rs []replicaRun, f func(replicaRun) time.Duration) float64 {
		return medianOf(rs, func(r replicaRun) float64 { return float64(f(r).Milliseconds()) / max(r.count, 1) * 1000 })
	}
	totals := map[int]float64{}
	for _, n := range []int{1, tierReplicas} {
		rs := runs[n]
		gw := perK(rs, func(r replicaRun) time.Duration { return r.cpu.gateway })
		leases := perK(rs, func(r replicaRun) time.Duration { return r.cpu.leases })
		totals[n] = perK(rs, func(r replicaRun) time.Duration { return r.cpu.gateway + r.cpu.leases })
		var failed int64
		for _, r := range rs {
			failed += r.errors
		}
		fmt.Fprintf(&b, "| %d | %.0f | %.0f ms | %.0f ms | %.0f ms | %.2f | %d |\n", n,
			medianOf(rs, func(r replicaRun) float64 { return r.tunnels }), gw, leases, totals[n],
			medianOf(rs, func(r replicaRun) float64 { return r.acquires / max(r.count, 1) }), failed)
	}
	fmt.Fprintf(&b, "\nCPU per tunnel, %d replicas against one: %.2f× (target ≤ 1.1×). Each rotating tunnel is two lease API calls: "+
		"a grant (counted above) and its release.\n\n", tierReplicas, totals[tierReplicas]/max(totals[1], 1e-9))
	return b.String(), nil
}

// measureOn runs new tunnels with the clients split over addrs at once.
func (s *setup) measureOn(ctx context.Context, addrs []string) (replicaRun, error) {
	acquiresBefore, err := s.acquires(ctx)
	if err != nil {
		return replicaRun{}, err
	}
	before, err := s.meter.read()
	if err != nil {
		return replicaRun{}, err
	}
	results := make([]result, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			results[i] = newTunnels(addr, s.origins.echo, s.gwAuth, s.o.clients/len(addrs), s.o.duration, pingExchange)
		})
	}
	wg.Wait()
	after, err := s.meter.read()
	if err != nil {
		return replicaRun{}, err
	}
	acquiresAfter, err := s.acquires(ctx)
	if err != nil {
		return replicaRun{}, err
	}
	r := replicaRun{cpu: after.minus(before), acquires: acquiresAfter - acquiresBefore}
	for _, x := range results {
		r.tunnels, r.count, r.errors = r.tunnels+x.perSecond, r.count+x.count, r.errors+x.errors
	}
	return r, nil
}

// acquires is the lease API's granted acquires so far.
func (s *setup) acquires(ctx context.Context) (float64, error) {
	m, err := operatortest.Scrape(ctx, s.operatorMetrics)
	if err != nil {
		return 0, err
	}
	var n float64
	for _, outcome := range []string{"granted", "waited"} {
		v, _ := m.Value("proxy_operator_lease_acquires_total", map[string]string{"outcome": outcome})
		n += v
	}
	return n, nil
}

func medianOf[T any](rs []T, f func(T) float64) float64 {
	v := make([]float64, 0, len(rs))
	for _, r := range rs {
		v = append(v, f(r))
	}
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}
