// Command store measures the lease store in-process (issue 16): acquire +
// release pairs on a store of N proxies (MaxLeases 1), in three
// placements that alternate round by round, with the same loop body:
//
//	one goroutine on one core (GOMAXPROCS=1): the one-core rate;
//	G goroutines on one core: a lock convoy would show here first;
//	G goroutines on every core: what the store gives a busy server.
//
// Targets: at least 1,000,000 pairs/s on one core, and G goroutines no
// worse than one goroutine on one core. Every 64th pair of each goroutine
// is timed (two clock reads on every pair would be a tenth of its cost),
// for the p99 of one pair. Allocations per pair come from the runtime's
// counters, so they include everything the process did.
//
//	go run ./pkg/testsuites/bench/store
//	go run ./pkg/testsuites/bench/store -cpuprofile store.pprof   # a profile of every measurement
//	go run ./pkg/testsuites/bench/store -only 3 -cpuprofile store.pprof   # of the third placement alone
//
// It prints markdown on stdout and progress on stderr. It is a measurement,
// not a test: it asserts nothing.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// Issue 16's targets.
const (
	targetOneCore    = 1_000_000
	targetContention = 1.0
	// timeEvery: one pair in this many is timed.
	timeEvery = 64
)

// placement is where a measurement runs.
type placement struct {
	name       string
	goroutines int
	procs      int
}

// result is one measurement.
type result struct {
	pairs     int64
	wall, cpu time.Duration
	mallocs   uint64
	p99       time.Duration
}

func (r result) rate() float64          { return float64(r.pairs) / r.wall.Seconds() }
func (r result) ratePerCPU() float64    { return float64(r.pairs) / r.cpu.Seconds() }
func (r result) allocsPerPair() float64 { return float64(r.mallocs) / float64(r.pairs) }

func main() {
	var (
		proxies    = flag.Int("proxies", 1000, "proxies in the store (MaxLeases 1 each)")
		goroutines = flag.Int("goroutines", 64, "goroutines of the contended placements")
		rounds     = flag.Int("rounds", 7, "alternating rounds (each: every placement once)")
		round      = flag.Duration("round", time.Second, "length of one measurement")
		cpuProfile = flag.String("cpuprofile", "", "if set, write a CPU profile of every measurement to this file")
		only       = flag.Int("only", 0, "if set, measure only this placement (1, 2 or 3), for a profile of it alone")
	)
	flag.Parse()
	if err := run(*proxies, *goroutines, *rounds, *round, *cpuProfile, *only); err != nil {
		fmt.Fprintln(os.Stderr, "store bench:", err)
		os.Exit(1)
	}
}

func run(proxies, goroutines, rounds int, round time.Duration, cpuProfile string, only int) error {
	cores := runtime.NumCPU()
	placements := []placement{
		{"1 goroutine, 1 core", 1, 1},
		{fmt.Sprintf("%d goroutines, 1 core", goroutines), goroutines, 1},
		{fmt.Sprintf("%d goroutines, %d cores", goroutines, cores), goroutines, cores},
	}
	if only != 0 {
		if only < 1 || only > len(placements) {
			return fmt.Errorf("-only %d: want 1 to %d", only, len(placements))
		}
		placements = placements[only-1 : only]
	}
	st, err := newStore(proxies)
	if err != nil {
		return err
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))

	results := make([][]result, len(placements)) // by placement, then round
	// A short warm-up in every placement, not reported.
	for _, p := range placements {
		if _, err := measure(st, p, round/4); err != nil {
			return err
		}
	}
	for r := range rounds {
		// Rotate which placement goes first, so that none always follows another.
		for i := range placements {
			p := (r + i) % len(placements)
			res, err := measure(st, placements[p], round)
			if err != nil {
				return err
			}
			results[p] = append(results[p], res)
			fmt.Fprintf(os.Stderr, "store bench: round %d: %s: %.0f pairs/s\n", r+1, placements[p].name, res.rate())
		}
	}
	report(os.Stdout, proxies, rounds, round, placements, results)
	return nil
}

func newStore(proxies int) (*store.Store, error) {
	st, err := store.New(store.Config{Key: []byte("benchmark-key-of-thirty-two-byte")})
	if err != nil {
		return nil, err
	}
	for i := range proxies {
		name := "p" + strconv.Itoa(i)
		st.Upsert(store.ProxyInfo{
			Key: store.ObjectName{Namespace: "crawl", Name: name}, UID: types.UID(name), Ready: true,
			URL: fmt.Sprintf("http://127.0.%d.%d:3128", i/250, 1+i%250), LatencyMillis: int64(i % 97), MaxLeases: 1,
			Labels: map[string]string{"region": []string{"eu", "us"}[i%2]},
		})
	}
	st.Lead(time.Time{}, time.Time{})
	return st, nil
}

// measure runs p.goroutines goroutines doing pairs on p.procs cores for d.
func measure(st *store.Store, p placement, d time.Duration) (result, error) {
	runtime.GOMAXPROCS(p.procs)
	runtime.GC()
	var (
		stop    atomic.Bool
		start   sync.WaitGroup
		done    sync.WaitGroup
		pairs   = make([]int64, p.goroutines)
		timed   = make([][]time.Duration, p.goroutines)
		failure atomic.Pointer[error]
	)
	start.Add(1)
	ctx := context.Background()
	for g := range p.goroutines {
		done.Go(func() {
			req := store.AcquireRequest{Holder: "worker-" + strconv.Itoa(g+1)}
			start.Wait()
			n := int64(0)
			for !stop.Load() {
				var t0 time.Time
				if n%timeEvery == 0 {
					t0 = time.Now()
				}
				l, err := st.Acquire(ctx, req)
				if err == nil {
					err = st.ReleaseAs("", l.ID, store.OutcomeOK, "", store.Report{})
				}
				if err != nil {
					// A copy: taking err's own address would move it to the
					// heap on every pair, an allocation that is the bench's.
					failed := err
					failure.Store(&failed)
					return
				}
				if n%timeEvery == 0 {
					timed[g] = append(timed[g], time.Since(t0))
				}
				n++
			}
			pairs[g] = n
		})
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0, wall0 := processCPU(), time.Now()
	start.Done()
	time.Sleep(d)
	stop.Store(true)
	done.Wait()
	wall, cpu := time.Since(wall0), processCPU()-cpu0
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if err := failure.Load(); err != nil {
		return result{}, fmt.Errorf("%s: %w", p.name, *err)
	}
	res := result{wall: wall, cpu: cpu, mallocs: after.Mallocs - before.Mallocs}
	var all []time.Duration
	for g := range pairs {
		res.pairs += pairs[g]
		all = append(all, timed[g]...)
	}
	if len(all) > 0 {
		slices.Sort(all)
		res.p99 = all[(len(all)-1)*99/100]
	}
	return res, nil
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func report(w *os.File, proxies, rounds int, round time.Duration, placements []placement, results [][]result) {
	fmt.Fprintf(w, "store benchmark: %s, %d CPUs; %d proxies (MaxLeases 1); %d alternating rounds of %v; acquire+release pairs, every %dth timed\n\n",
		runtime.Version(), runtime.NumCPU(), proxies, rounds, round, timeEvery)
	header := []string{"round"}
	for _, p := range placements {
		header = append(header, p.name+" pairs/s")
	}
	for _, p := range placements[1:] {
		header = append(header, p.name+" ÷ 1 goroutine")
	}
	fmt.Fprintln(w, "| "+strings.Join(header, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Repeat("---:|", len(header)))
	ratios := make([][]float64, len(placements)) // by placement, then round; [0] unused
	for r := range rounds {
		row := []string{strconv.Itoa(r + 1)}
		for p := range placements {
			row = append(row, fmt.Sprintf("%.0f", results[p][r].rate()))
		}
		for p := 1; p < len(placements); p++ {
			ratio := results[p][r].rate() / results[0][r].rate()
			ratios[p] = append(ratios[p], ratio)
			row = append(row, fmt.Sprintf("%.2f×", ratio))
		}
		fmt.Fprintln(w, "| "+strings.Join(row, " | ")+" |")
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| placement | pairs/s | pairs per CPU-second | allocs/pair | p99 of one pair | ÷ 1 goroutine on 1 core | target |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---|")
	for p, pl := range placements {
		var rate, perCPU, allocs, p99 []float64
		for _, res := range results[p] {
			rate = append(rate, res.rate())
			perCPU = append(perCPU, res.ratePerCPU())
			allocs = append(allocs, res.allocsPerPair())
			p99 = append(p99, float64(res.p99))
		}
		ratio, target := "–", fmt.Sprintf("≥ %d pairs/s: %s", targetOneCore, met(median(rate) >= targetOneCore))
		switch {
		case p == 0 && (pl.goroutines > 1 || pl.procs > 1):
			// -only: the reference was not measured.
			target = "– (measured alone)"
		case p > 0:
			ratio = fmt.Sprintf("%.2f×", median(ratios[p]))
			target = fmt.Sprintf("≥ %.1f×: %s", targetContention, met(median(ratios[p]) >= targetContention))
		}
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.2f | %v | %s | %s |\n", pl.name, median(rate), median(perCPU), median(allocs),
			time.Duration(median(p99)).Round(100*time.Nanosecond), ratio, target)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Medians over the rounds; the ratio is the median of each round's ratio.")
}

func met(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**not met**"
}
