package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Grants and renewals sign their IDs after unlocking the store. Many
// callers at once, with revocations, expiries and listings in between,
// under the race detector
// (make test runs -race): every call answers as documented, no proxy is
// ever held beyond its capacity, and every ID a grant or renewal returned
// releases its lease while it is live.
func TestConcurrentCallsKeepTheInvariants(t *testing.T) {
	const (
		workers = 8
		proxies = 4
		rounds  = 400
	)
	var infos []ProxyInfo
	for i := range proxies {
		infos = append(infos, newProxy(fmt.Sprintf("p%d", i), withMaxLeases(2)))
	}
	s, clk, _ := newTestStore(t, infos)
	var (
		wg       sync.WaitGroup
		stop     atomic.Bool
		released atomic.Int64
	)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
		stop.Store(true)
	}
	// Ends a lease: ErrRevoked and ErrUnknownLease are what a revocation or
	// an expiry in between leaves.
	gone := func(err error) bool { return errors.Is(err, ErrRevoked) || errors.Is(err, ErrUnknownLease) }

	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			owner := fmt.Sprintf("owner-%d", w%3)
			for range rounds {
				if stop.Load() {
					return
				}
				l, err := s.Acquire(t.Context(), AcquireRequest{Holder: "w", Owner: owner})
				var unavailable *UnavailableError
				if errors.As(err, &unavailable) {
					continue
				}
				if err != nil {
					fail("Acquire: %v", err)
					return
				}
				id := l.ID
				if rng.IntN(2) == 0 {
					renewed, err := s.RenewAs(owner, id, 0, Report{})
					switch {
					case gone(err):
						continue
					case err != nil:
						fail("RenewAs: %v", err)
						return
					}
					id = renewed.ID
				}
				if _, err := s.GetAs(owner, id); err != nil && !gone(err) {
					fail("GetAs: %v", err)
					return
				}
				if ns, err := s.LeaseNamespace(owner, id); err == nil && ns != testNamespace {
					fail("LeaseNamespace: %q", ns)
					return
				}
				switch err := s.ReleaseAs(owner, id, OutcomeOK, "", Report{}); {
				case err == nil:
					released.Add(1)
				case !gone(err):
					fail("ReleaseAs: %v", err)
					return
				}
			}
		})
	}
	var churn sync.WaitGroup
	churn.Go(func() { // revocations: a proxy that was not Ready in between
		for i := 0; !stop.Load(); i++ {
			p := infos[i%proxies]
			p.ReadySince = t0.Add(time.Duration(i) * time.Second)
			s.Upsert(p)
			time.Sleep(100 * time.Microsecond)
		}
	})
	churn.Go(func() { // expiries, which recycle the ended leases' structs
		for !stop.Load() {
			clk.Step(DefaultTTL + time.Second)
			time.Sleep(200 * time.Microsecond)
		}
	})
	churn.Go(func() { // listings sign every live lease
		for !stop.Load() {
			live, err := s.List(LeaseFilter{})
			if err != nil {
				fail("List: %v", err)
				return
			}
			held := map[string]int{}
			for _, l := range live {
				if held[l.Proxy.Key.Name]++; held[l.Proxy.Key.Name] > 2 {
					fail("%s holds %d leases, capacity 2", l.Proxy.Key.Name, held[l.Proxy.Key.Name])
				}
				if l.ID == "" {
					fail("a listed lease without an ID")
				}
			}
		}
	})
	wg.Wait()
	stop.Store(true)
	churn.Wait()
	if released.Load() == 0 {
		t.Error("no release succeeded: the test exercised nothing")
	}
}
