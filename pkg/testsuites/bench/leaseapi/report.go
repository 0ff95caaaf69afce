package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// The report: markdown tables of the rounds and their medians.

func format(cfg config, loadBefore, loadAfter string, results [][]result) string {
	var b strings.Builder
	trivialServer := "the lease API's server settings (server.NewHTTPServer)"
	if *bareTrivial {
		trivialServer = "net/http's defaults and a header timeout (-bare-trivial)"
	}
	fmt.Fprintf(&b, "lease API benchmark: %s, %d CPUs; %d External proxies (MaxLeases 1), %d clients (pkg/lease/client), %d alternating rounds of %v; trivial handler on %s; load average %s before, %s after\n\n",
		runtime.Version(), runtime.NumCPU(), cfg.proxies, cfg.clients, cfg.rounds, cfg.round, trivialServer, loadBefore, loadAfter)
	b.WriteString("| round | trivial handler pairs/s | operator pairs/s | ratio | trivial p50 | operator p50 | trivial p99 | operator p99 | p99 ratio | trivial CPU/pair | operator CPU/pair |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var ratios, p99Ratios []float64
	for i, r := range results {
		t, o := r[0], r[1]
		ratio := o.pairsPerSec / t.pairsPerSec
		p99Ratio := float64(o.p99) / float64(t.p99)
		ratios, p99Ratios = append(ratios, ratio), append(p99Ratios, p99Ratio)
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.2f× | %v | %v | %v | %v | %.2f× | %v | %v |\n", i+1,
			t.pairsPerSec, o.pairsPerSec, ratio, round(t.p50), round(o.p50), round(t.p99), round(o.p99), p99Ratio,
			t.cpuPerPair.Round(time.Microsecond), o.cpuPerPair.Round(time.Microsecond))
	}
	pairs, p99 := median(ratios), median(p99Ratios)
	fmt.Fprintf(&b, "\nMedian of %d rounds: operator/trivial pairs/s **%.2f×** (target ≥ %.2f×: %s), p99 **%.2f×** (target ≤ %.1f×: %s).\n",
		len(results), pairs, targetPairsRatio, verdict(pairs >= targetPairsRatio), p99, targetP99Ratio, verdict(p99 <= targetP99Ratio))
	return b.String()
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func roundLine(sides []side, res []result) string {
	var parts []string
	for i, s := range sides {
		parts = append(parts, fmt.Sprintf("%s %.0f pairs/s, %.3f CPU-s/1000 pairs", s.name, res[i].pairsPerSec, cpuPerThousand(res[i])))
	}
	return strings.Join(parts, "; ")
}
