package main

import (
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/health"
)

// formatReport renders the results as markdown.
func formatReport(cfg config, fleetN int, results []result) string {
	var sb strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	p("Controller benchmark: %s, %d CPUs (the operator runs with GOMAXPROCS = CPUs, built without -race); "+
		"External proxies probed every %v at a loopback fleet of %d listeners (answer delay %v); "+
		"the bench creates with QPS %d/burst %d from %d goroutines.\n\n",
		runtime.Version(), runtime.NumCPU(), cfg.interval, fleetN, cfg.delay, createQPS, createBurst, createWorkers)
	if cfg.workers > 0 {
		p("The operator runs with --workers=%d.\n\n", cfg.workers)
	}

	sb.WriteString(formatConvergence(cfg, results))
	sb.WriteString(formatSteady(results))
	sb.WriteString(formatSessions(cfg, results))
	sb.WriteString(formatDashboards(results))
	sb.WriteString(formatCostGrowth(cfg, results))
	sb.WriteString(formatProbes(results))
	sb.WriteString(formatHowToRead())
	return sb.String()
}

// formatConvergence is the table of the N-at-once creation runs.
func formatConvergence(cfg config, results []result) string {
	var sb strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	p("### Convergence: N External proxies created at once\n\n")
	p("| operator QPS/burst | proxies | bench creates all (s) | bench creates/s | first create → all Ready (s) | floor (s) | target: 1.1 × (floor + creates) (s) | operator CPU (core-s) | status writes/proxy | other Proxy writes/proxy | events/proxy | other writes (total) | rejected writes (total) |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	for _, r := range results {
		if r.spec.proxies == 0 {
			continue
		}
		n := float64(r.spec.proxies)
		w := r.converge.all
		floor := floorSeconds(r.spec, cfg.interval)
		p("| %s | %d | %.1f | %.0f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %s | %s |\n",
			r.name, r.spec.proxies, r.create.Seconds(), n/r.create.Seconds(), r.ready.Seconds(),
			floor, convergenceSlack*(floor+r.create.Seconds()), r.opCPU,
			w["proxies/status"]/n, w["proxies"]/n, w["events"]/n,
			w.others(1, "%.0f", "proxies/status", "proxies", "events"), r.converge.rejected.others(1, "%.0f"))
	}

	return sb.String()
}

// formatSteady is the table of the steady windows, references included.
func formatSteady(results []result) string {
	var sb strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	p("\n### Steady state: all Ready, half of them leased\n\n")
	p("| operator | proxies | leases held | window (s) | operator CPU (cores) | operator RSS (MiB) | operator peak RSS (MiB) | kube-apiserver CPU (cores) | kube-apiserver RSS (MiB) | etcd CPU (cores) | etcd RSS (MiB) | Proxy writes/min (+status) | Proxy writes per proxy per hour (target ≤ 1) | events/min | other writes/min | rejected writes/min |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	for _, r := range results {
		st := r.steady
		if st == nil {
			continue
		}
		name, op := "idle (no proxies)", fmt.Sprintf("%.3f | %.0f | %.0f", st.operator.cores, mib(st.operator.rss), mib(st.operator.hwm))
		switch {
		case !st.operatorPresent:
			name, op = "none: API server alone", "– | – | –"
		case r.spec.proxies > 0:
			name = "QPS/burst " + r.name
		}
		minutes, w := st.window.Minutes(), st.writes.all
		perProxyHour := "–"
		if r.spec.proxies > 0 {
			perProxyHour = fmt.Sprintf("%.2f", (w["proxies"]+w["proxies/status"])/minutes*60/float64(r.spec.proxies))
		}
		p("| %s | %d | %d | %.0f | %s | %.3f | %.0f | %.3f | %.0f | %.1f | %s | %.1f | %s | %s |\n",
			name, r.spec.proxies, r.leases, st.window.Seconds(), op,
			st.api.cores, mib(st.api.rss), st.etcd.cores, mib(st.etcd.rss),
			(w["proxies"]+w["proxies/status"])/minutes, perProxyHour, w["events"]/minutes,
			w.others(minutes, "%.1f", "proxies", "proxies/status", "events"), st.writes.rejected.others(minutes, "%.1f"))
	}

	return sb.String()
}

// formatProbes is the table of the operator's probe counters in the steady windows.
func formatProbes(results []result) string {
	var sb strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	p("\n### Health probes in the steady window\n\n")
	p("| operator | proxies | probes/min | failed probes/min, by result | probes started > %.2f s late | dispatches skipped/min | verdicts reported/min, by reason | Healthy events/min | Unhealthy events/min | most frequent Unhealthy messages (per min) |\n", lateProbe)
	p("|---|---:|---:|---|---:|---:|---|---:|---:|---|\n")
	for _, r := range results {
		st := r.steady
		if st == nil || st.health == nil || r.spec.proxies == 0 {
			continue
		}
		h, minutes := st.health, st.window.Minutes()
		total := 0.0
		for _, n := range h.probes {
			total += n
		}
		late := "0"
		if h.scheduled > 0 {
			late = fmt.Sprintf("%.0f (%.2f%%)", h.late, 100*h.late/h.scheduled)
		}
		p("| QPS/burst %s | %d | %.0f | %s | %s | %.1f | %s | %.1f | %.1f | %s |\n",
			r.name, r.spec.proxies, total/minutes, h.probes.others(minutes, "%.1f", health.ResultSuccess), late, h.skipped/minutes,
			h.reports.others(minutes, "%.1f"),
			h.events[controller.ReasonHealthy]/minutes, h.events[controller.ReasonUnhealthy]/minutes, topMessages(h.unhealthyMessages, 3, minutes))
	}

	return sb.String()
}

// formatHowToRead explains the tables above it.
func formatHowToRead() string {
	var sb strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	p("\n#### How to read this\n\n")
	p("- **Convergence.** The time from the first create to the moment the bench's watch saw the last proxy Ready, " +
		"beside the time the bench's own client took to create the N objects on the same API server in the same run " +
		"(the operator works while they are created). The floor is issue 16's: first probes spread over one interval, " +
		"and two status writes per proxy under the operator's --kube-api-qps/--kube-api-burst, " +
		"so floor = max(interval, (2N − burst) / QPS); the target is 1.1 × (floor + the bench's creation time). " +
		"Since docs/decisions/0121-proxy-created-while-engine-runs-probed.md only the fleet a new leader meets at once is spread over the interval; a proxy created while the engine runs " +
		"is probed at the next tick, so below the write bound expect about the creation time plus a few seconds.\n")
	p("- **Writes** are counted at the API server (apiserver_request_total, verbs POST/PUT/PATCH/DELETE/APPLY, any response code; "+
		"the rejected column lists those that were not 2xx, such as conflicts), "+
		"before and after each phase, with the bench's N creates taken out. An External proxy needs two status writes "+
		"(pkg/controller/external.go, status.go: the endpoint recorded, phase Pending; then the first verdict, phase Ready; "+
		"TestWritesPerProxy asserts at most 2) and one Healthy event (events have their own client and rate limit). "+
		"Leases are the operator's leader election (a renewal every 2 s) plus kube-apiserver's own lease; "+
		"configmaps are the lease API's horizon. Convergence counts include the %v the bench waits after all Ready for the last events.\n", settle)
	p("- **Steady state** starts once all proxies are Ready and half of them are leased (TTL above the window, so the lease store stays full); " +
		"CPU is utime+stime over the window divided by its length (1.0 = one core busy); RSS is VmRSS at its end, " +
		"peak RSS is VmHWM since the operator started (so it includes convergence). A healthy steady fleet should need no Proxy writes at all. " +
		"The rows without proxies are the references: the API server alone, and the operator leading an empty namespace. " +
		"testenv runs etcd with --unsafe-no-fsync, so its figures (and the API server's write latency) are kinder than a real cluster's.\n")
	p("- **Cost growth** is each size's steady row above the idle operator's: (RSS − idle RSS) / N, and (CPU − idle CPU) × 3600 / N " +
		"in core-seconds per proxy per hour, each beside the same figure at 10,000 (issue 16: within 1.2× at 50,000). " +
		"The fleet is served by children of at most 15,000 listeners each (this machine caps a process at 20,000 open files).\n")
	p("- **Health probes** are the operator's own counters (proxy_operator_probe_duration_seconds by result, " +
		"proxy_operator_probe_schedule_delay_seconds, proxy_operator_probe_dispatch_skipped_total) and the namespace's events by reason, " +
		"before and after the steady window. Every proxy of the fleet answers 204 from a loopback listener in the bench's child process, " +
		"so a failed probe is the machine not keeping up (the fleet, the operator and the API server share its cores), not a broken proxy; " +
		"a late start says the probe pool is behind, a timeout with on-time starts says the answer was slow.\n")
	p("- **QPS.** The %v/%d row is the same fleet with client-go's default QPS/burst, beside our defaults (%d/%d) at the same size; "+
		"every run has its own namespace and operator process, and the API server is shared.\n", clientGoQPS, clientGoBur, ourQPS, ourBurst)
	return sb.String()
}

// convergenceSlack is issue 16's allowance on convergence: all Ready within
// the floor plus the bench's own creation time, plus 10%.
const convergenceSlack = 1.1

// costGrowthLimit is issue 16's bound on per-proxy cost growth: at the
// largest size within 1.2× of that at 10,000.
const costGrowthLimit = 1.2

// formatCostGrowth renders the per-proxy cost of each size with a steady
// window, above the idle operator: RSS bytes and CPU per proxy, and
// convergence beside its floor; each size's cost beside that of 10,000
// (or the first size, without a 10,000 run).
func formatCostGrowth(cfg config, results []result) string {
	var idle *steadyResult
	var rows []result
	for _, r := range results {
		switch {
		case r.steady == nil || !r.steady.operatorPresent:
		case r.spec.proxies == 0:
			idle = r.steady
		case r.spec.qps == ourQPS:
			rows = append(rows, r)
		}
	}
	if idle == nil || len(rows) == 0 {
		return ""
	}
	type cost struct{ rss, cpu float64 }
	costOf := func(r result) cost {
		n := float64(r.spec.proxies)
		return cost{
			rss: float64(r.steady.operator.rss-idle.operator.rss) / n,
			cpu: (r.steady.operator.cores - idle.operator.cores) * 3600 / n,
		}
	}
	ref := rows[0]
	for _, r := range rows {
		if r.spec.proxies == 10000 {
			ref = r
		}
	}
	refCost := costOf(ref)
	var sb strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	p("\n### Cost growth: per proxy, above the idle operator, in steady state\n\n")
	p("| proxies | operator RSS (MiB) | RSS per proxy (bytes) | × at %d (target ≤ %.1f×) | operator CPU (cores) | CPU per proxy (core-s per hour) | × at %d (target ≤ %.1f×) | first create → all Ready (s) | floor (s) | steady window (s) |\n",
		ref.spec.proxies, costGrowthLimit, ref.spec.proxies, costGrowthLimit)
	p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		c := costOf(r)
		p("| %d | %.0f | %.0f | %.2f× | %.3f | %.2f | %.2f× | %.1f | %.1f | %.0f |\n",
			r.spec.proxies, float64(r.steady.operator.rss)/(1<<20), c.rss, c.rss/refCost.rss,
			r.steady.operator.cores, c.cpu, c.cpu/refCost.cpu,
			r.ready.Seconds(), floorSeconds(r.spec, cfg.interval), r.steady.window.Seconds())
	}
	return sb.String()
}

// floorSeconds is the least time to all Ready the design allows: first
// probes spread over one interval, and two status writes per proxy through
// a token bucket of qps and burst.
func floorSeconds(s runSpec, interval time.Duration) float64 {
	writes := max(0, float64(2*s.proxies-s.burst)) / float64(s.qps)
	return max(interval.Seconds(), writes)
}
