package lease

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// TestFailoverProperties drives leases through random leader changes, by
// crash (no StopLeading) or by graceful handover, over the HTTP handler, with
// the horizon shared in memory. Leases live on a leader that is gone count
// until they expire or the new leader re-learns them. After every step:
//   - no proxy is held by more than maxLeases leases, counting the current
//     leader's live leases and the unexpired, not re-learned leases of the
//     leaders before it (so a new leader never grants early). Leases their
//     holders ended (released, or told they are over) do not count: a
//     holder that renews one anyway ("zombie") may get it back from a new
//     leader that cannot know, but it holds a slot no live lease holds;
//   - a renewal succeeds only before the lease's expiry;
//   - while a new leader recovers, every lease that was live on the old
//     leader renews, unless its proxy changed since.
func TestFailoverProperties(t *testing.T) {
	seeds := failoverSeeds
	if testing.Short() {
		seeds = 10
	}
	for seed := range uint64(seeds) {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			runFailoverProperties(t, seed, 250)
		})
	}
}

// failoverSeeds is how many seeds TestFailoverProperties runs.
const failoverSeeds = 60

type fleetLease struct {
	holder    string
	id        string
	key       leaseKey
	proxy     cache.ObjectName
	expiresAt time.Time
	ended     bool // released, or a renewal said it is over
}

type frozenLease struct {
	proxy     cache.ObjectName
	expiresAt time.Time
	// frozenAt is the step at which its leader stopped.
	frozenAt int
}

type fleet struct {
	t         *testing.T
	rng       *rand.Rand
	clk       *clocktesting.FakeClock
	persisted *memHorizon
	proxies   map[cache.ObjectName]ProxyInfo
	leader    *testServer
	leases    []*fleetLease
	// frozen: leases live on a previous leader when it stopped.
	frozen map[leaseKey]frozenLease
	// changedAt: the step at which a proxy last changed.
	changedAt map[cache.ObjectName]int
	steps     int
	holders   int
	log       []string
}

func runFailoverProperties(t *testing.T, seed uint64, steps int) {
	f := &fleet{
		t: t, rng: rand.New(rand.NewPCG(seed, 42)), clk: clocktesting.NewFakeClock(t0), persisted: &memHorizon{},
		proxies: map[cache.ObjectName]ProxyInfo{}, frozen: map[leaseKey]frozenLease{}, changedAt: map[cache.ObjectName]int{},
	}
	for i := range 4 {
		p := newProxy("p"+strconv.Itoa(i), withMaxLeases(int32(1+f.rng.IntN(2))), withLatency(int64(f.rng.IntN(30))))
		f.proxies[p.Key] = p
	}
	f.leader = f.newLeader()
	type op struct {
		weight int
		run    func()
	}
	ops := []op{{30, f.acquire}, {25, f.renew}, {10, f.release}, {15, f.step}, {4, f.flipHealth}, {4, f.failover}}
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	for range steps {
		f.steps++
		n := f.rng.IntN(total)
		for _, o := range ops {
			if n < o.weight {
				o.run()
				break
			}
			n -= o.weight
		}
		f.check()
		if t.Failed() {
			t.Logf("seed %d, steps:\n%s", seed, joinLast(f.log, 40))
			return
		}
	}
}

func (f *fleet) logf(format string, args ...any) {
	f.log = append(f.log, fmt.Sprintf("%v ", f.clk.Now().Sub(t0))+fmt.Sprintf(format, args...))
}

// newLeader starts a fresh replica (a restarted process has no state) and
// makes it lead.
func (f *fleet) newLeader() *testServer {
	f.clk.Step(time.Millisecond) // terms start apart
	store, err := NewStore(Config{Clock: f.clk, Key: testKey})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, p := range f.proxies {
		store.Upsert(p)
	}
	auth := &fakeAuth{}
	srv, err := NewServer(ServerConfig{Store: store, Authenticator: auth, Authorizer: auth, Horizon: f.persisted.replica()})
	if err != nil {
		f.t.Fatal(err)
	}
	logger := ktesting.NewLogger(f.t, ktesting.NewConfig(ktesting.Verbosity(0)))
	if err := srv.StartLeading(klog.NewContext(f.t.Context(), logger)); err != nil {
		f.t.Fatal(err)
	}
	return &testServer{t: f.t, srv: srv, store: store, clk: f.clk, auth: auth, persisted: f.persisted, handler: srv.Handler()}
}

func (f *fleet) acquire() {
	f.holders++
	holder := "h" + strconv.Itoa(f.holders)
	ttl := []string{"5s", "20s", "60s"}[f.rng.IntN(3)]
	rec := f.leader.do(http.MethodPost, "/v1/leases", `{"holder":"`+holder+`","ttl":"`+ttl+`"}`)
	f.logf("acquire %s ttl=%s: %d", holder, ttl, rec.Code)
	switch rec.Code {
	case http.StatusCreated:
		var l wire.Lease
		if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil {
			f.t.Fatal(err)
		}
		tok, err := f.leader.store.signer.decode(l.ID)
		if err != nil {
			f.t.Fatal(err)
		}
		f.leases = append(f.leases, &fleetLease{holder: holder, id: l.ID, key: tok.key, proxy: tok.proxy, expiresAt: l.ExpiresAt})
		f.logf("  granted %s on %s slot %d until %v", tok.key, tok.proxy, tok.slot, l.ExpiresAt.Sub(t0))
	case http.StatusServiceUnavailable:
	default:
		f.t.Errorf("acquire: %d %s", rec.Code, rec.Body)
	}
}

func (f *fleet) someLease() *fleetLease {
	if len(f.leases) == 0 {
		return nil
	}
	return f.leases[len(f.leases)-1-min(len(f.leases)-1, int(f.rng.ExpFloat64()*6))]
}

func (f *fleet) renew() {
	l := f.someLease()
	if l == nil {
		return
	}
	now := f.clk.Now()
	rec := f.leader.do(http.MethodPost, "/v1/leases/"+l.id+"/renew", "")
	f.logf("renew %s (%s on %s, until %v): %d", l.holder, l.key, l.proxy, l.expiresAt.Sub(t0), rec.Code)
	frozen, wasFrozen := f.frozen[l.key]
	switch rec.Code {
	case http.StatusOK:
		if !now.Before(l.expiresAt) {
			f.t.Errorf("renewed the lease of %s, which expired %v ago", l.holder, now.Sub(l.expiresAt))
		}
		var got wire.Lease
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			f.t.Fatal(err)
		}
		l.id, l.expiresAt = got.ID, got.ExpiresAt
	case http.StatusNotFound, http.StatusConflict, http.StatusGone:
		// A lease that was live on the previous leader and whose proxy did not
		// change since must renew on the new one.
		if wasFrozen && now.Before(frozen.expiresAt) && f.changedAt[l.proxy] < frozen.frozenAt && !l.ended && now.Before(l.expiresAt) {
			f.t.Errorf("renewal of %s's lease, live on the previous leader, failed on the new one: %s", l.holder, rec.Body)
		}
		l.ended = true
	case http.StatusServiceUnavailable:
		if errorOf(f.t, rec).Code != codeUnavailable {
			f.t.Errorf("renew: %d %s", rec.Code, rec.Body)
		}
	default:
		f.t.Errorf("renew: %d %s", rec.Code, rec.Body)
	}
}

func (f *fleet) release() {
	l := f.someLease()
	if l == nil {
		return
	}
	rec := f.leader.do(http.MethodDelete, "/v1/leases/"+l.id+"?outcome="+[]string{"ok", "error"}[f.rng.IntN(2)], "")
	f.logf("release %s: %d", l.holder, rec.Code)
	switch rec.Code {
	case http.StatusNoContent, http.StatusNotFound:
		l.ended = true
	default:
		f.t.Errorf("release: %d %s", rec.Code, rec.Body)
	}
}

func (f *fleet) step() {
	d := time.Duration(f.rng.IntN(30)) * time.Second
	f.clk.Step(d)
	f.logf("step %v", d)
}

func (f *fleet) flipHealth() {
	keys := make([]cache.ObjectName, 0, len(f.proxies))
	for k := range f.proxies {
		keys = append(keys, k)
	}
	k := keys[f.rng.IntN(len(keys))]
	p := f.proxies[k]
	p.Ready = !p.Ready
	if p.Ready {
		p.ReadySince = t0.Add(time.Duration(f.steps)) // unique, as a condition's transition time is
	}
	f.proxies[k] = p
	f.leader.store.Upsert(p)
	f.changedAt[k] = f.steps
	f.logf("%s Ready=%v", k, p.Ready)
}

func (f *fleet) failover() {
	live, err := f.leader.store.List(LeaseFilter{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, l := range live {
		tok, err := f.leader.store.signer.decode(l.ID)
		if err != nil {
			f.t.Fatal(err)
		}
		f.frozen[tok.key] = frozenLease{proxy: tok.proxy, expiresAt: l.ExpiresAt, frozenAt: f.steps}
	}
	graceful := f.rng.IntN(2) == 0
	if graceful {
		if err := f.leader.srv.StopLeading(f.t.Context()); err != nil {
			f.t.Fatal(err)
		}
	}
	// The old leader's background horizon writes are fenced off by the claim.
	f.leader = f.newLeader()
	f.logf("failover (graceful %v) with %d live leases", graceful, len(live))
}

func (f *fleet) check() {
	// Let a background horizon extension finish, so that a seed replays alike.
	for f.leader.srv.horizon.extending.Load() {
		runtime.Gosched()
	}
	now := f.clk.Now()
	ended := map[leaseKey]bool{}
	for _, l := range f.leases {
		ended[l.key] = l.ended
	}
	held := map[cache.ObjectName]int{}
	current, err := f.leader.store.List(LeaseFilter{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, l := range current {
		tok, err := f.leader.store.signer.decode(l.ID)
		if err != nil {
			f.t.Fatal(err)
		}
		if !ended[tok.key] {
			held[l.Proxy.Key]++
		}
	}
	f.leader.store.mu.Lock()
	for key, fl := range f.frozen {
		if _, relearned := f.leader.store.leases[key]; !relearned && now.Before(fl.expiresAt) && !ended[key] {
			held[fl.proxy]++
		}
	}
	f.leader.store.mu.Unlock()
	for key, n := range held {
		if p := f.proxies[key]; n > capacityOf(&p) {
			f.t.Errorf("%s is held by %d leases across leaders, maxLeases %d", key, n, f.proxies[key].MaxLeases)
		}
	}
	if err := f.leader.store.checkConsistency(); err != nil {
		f.t.Errorf("store structures: %v", err)
	}
}
