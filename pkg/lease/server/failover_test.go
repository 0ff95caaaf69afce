package server

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
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
//     leader renews, unless its proxy changed since;
//   - what the leader says of its proxies' free places agrees with the
//     leases it lists (the store's own structures under failover:
//     store's TestRelearning and the other tests of relearn_test.go).
//
// It sees only what the API and the store's exported methods show; a lease
// is followed across renewals and leaders by the key its ID carries
// (leaseKeyOf).
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
	proxy     store.ObjectName
	expiresAt time.Time
	ended     bool // released, or a renewal said it is over
}

type frozenLease struct {
	proxy     store.ObjectName
	expiresAt time.Time
	// frozenAt is the step at which its leader stopped.
	frozenAt int
}

type fleet struct {
	t         *testing.T
	rng       *rand.Rand
	clk       *clocktesting.FakeClock
	persisted *memHorizon
	proxies   map[store.ObjectName]store.ProxyInfo
	leader    *testServer
	leases    []*fleetLease
	// frozen: leases live on a previous leader when it stopped.
	frozen map[leaseKey]frozenLease
	// changedAt: the step at which a proxy last changed.
	changedAt map[store.ObjectName]int
	steps     int
	holders   int
	log       []string
}

func runFailoverProperties(t *testing.T, seed uint64, steps int) {
	f := &fleet{
		t: t, rng: rand.New(rand.NewPCG(seed, 42)), clk: clocktesting.NewFakeClock(t0), persisted: &memHorizon{},
		proxies: map[store.ObjectName]store.ProxyInfo{}, frozen: map[leaseKey]frozenLease{}, changedAt: map[store.ObjectName]int{},
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
	st, err := store.New(store.Config{Clock: f.clk, Key: testKey})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, p := range f.proxies {
		st.Upsert(p)
	}
	auth := &fakeAuth{}
	srv, err := New(Config{Store: st, Authenticator: auth, Authorizer: auth, Horizon: f.persisted.replica()})
	if err != nil {
		f.t.Fatal(err)
	}
	logger := ktesting.NewLogger(f.t, ktesting.NewConfig(ktesting.Verbosity(0)))
	if err := srv.StartLeading(klog.NewContext(f.t.Context(), logger)); err != nil {
		f.t.Fatal(err)
	}
	return &testServer{t: f.t, srv: srv, store: st, clk: f.clk, auth: auth, persisted: f.persisted, handler: srv.Handler()}
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
		key, slot := leaseKeyOf(f.t, l.ID)
		proxy := store.ObjectName{Namespace: l.Proxy.Namespace, Name: l.Proxy.Name}
		f.leases = append(f.leases, &fleetLease{holder: holder, id: l.ID, key: key, proxy: proxy, expiresAt: l.ExpiresAt})
		f.logf("  granted %s on %s slot %d until %v", key, proxy, slot, l.ExpiresAt.Sub(t0))
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
		if errorOf(f.t, rec).Code != wire.CodeUnavailable {
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
	keys := make([]store.ObjectName, 0, len(f.proxies))
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
	live, err := f.leader.store.List(store.LeaseFilter{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, l := range live {
		key, _ := leaseKeyOf(f.t, l.ID)
		f.frozen[key] = frozenLease{proxy: l.Proxy.Key, expiresAt: l.ExpiresAt, frozenAt: f.steps}
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
	held := map[store.ObjectName]int{}
	current, err := f.leader.store.List(store.LeaseFilter{})
	if err != nil {
		f.t.Fatal(err)
	}
	// A frozen lease the leader lists is re-learned; one it re-learned as
	// over (released, revoked, superseded) its holder was told so, and ended.
	relearned := map[leaseKey]bool{}
	for _, l := range current {
		key, _ := leaseKeyOf(f.t, l.ID)
		relearned[key] = true
		if !ended[key] {
			held[l.Proxy.Key]++
		}
	}
	for key, fl := range f.frozen {
		if !relearned[key] && now.Before(fl.expiresAt) && !ended[key] {
			held[fl.proxy]++
		}
	}
	for key, n := range held {
		if n > capacityOf(f.proxies[key]) {
			f.t.Errorf("%s is held by %d leases across leaders, maxLeases %d", key, n, f.proxies[key].MaxLeases)
		}
	}
	f.checkFreePlaces(current)
}

// checkFreePlaces: every Ready proxy offers its capacity less the leases
// the leader lists on it, and no lease is listed on a proxy that is not
// Ready (which holds none).
func (f *fleet) checkFreePlaces(current []store.Lease) {
	listed := map[store.ObjectName]int{}
	for _, l := range current {
		listed[l.Proxy.Key]++
	}
	offered := map[store.ObjectName]bool{}
	for _, p := range f.leader.store.Proxies("", nil) {
		offered[p.Key] = true
		if want := int32(capacityOf(f.proxies[p.Key]) - listed[p.Key]); p.FreeLeases != want {
			f.t.Errorf("%s offers %d free places, want %d (capacity %d, %d leases listed)", p.Key, p.FreeLeases, want, p.MaxLeases, listed[p.Key])
		}
	}
	for key, n := range listed {
		if !offered[key] {
			f.t.Errorf("%s is not Ready but %d leases on it are listed", key, n)
		}
	}
}

// leaseKey is what names a lease across its renewals and leaders: the
// term that granted it and its serial in that term.
type leaseKey struct{ epoch, serial uint64 }

func (k leaseKey) String() string { return fmt.Sprintf("%x.%d", k.epoch, k.serial) }

// leaseKeyOf reads the key and slot of a lease from its ID, which is
// readable by design (pkg/lease/store's token.go: a version byte, then
// uvarints epoch, serial and slot).
func leaseKeyOf(t testing.TB, id string) (leaseKey, uint64) {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil || len(raw) < 2 {
		t.Fatalf("lease ID %q: %v", id, err)
	}
	r := bytes.NewReader(raw[1:])
	var fields [3]uint64
	for i := range fields {
		if fields[i], err = binary.ReadUvarint(r); err != nil {
			t.Fatalf("lease ID %q: %v", id, err)
		}
	}
	return leaseKey{epoch: fields[0], serial: fields[1]}, fields[2]
}

// capacityOf is how many leases p takes at once (maxLeases, at least 1).
func capacityOf(p store.ProxyInfo) int { return max(1, int(p.MaxLeases)) }

func joinLast(lines []string, n int) string {
	out := ""
	for _, l := range lines[max(0, len(lines)-n):] {
		out += "  " + l + "\n"
	}
	return out
}
