package leasemodel

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// lease is the lease granted on proxy at ms after t0.
func lease(proxy string, at int) LeaseRef { return LeaseRef{Proxy: proxy, GrantedAt: t0.Add(ms(at))} }

type opt func(*Op)

func domain(d string) opt   { return func(o *Op) { o.Domain = d } }
func session(s string) opt  { return func(o *Op) { o.Session = s } }
func as(id string) opt      { return func(o *Op) { o.Identity = id } }
func carrying(s string) opt { return func(o *Op) { o.State = s } }
func result(r Result) opt   { return func(o *Op) { o.Result = r } }
func bannedFor(d string) opt {
	return func(o *Op) { o.Outcome, o.BanDomain = "banned", d }
}

func op(kind Kind, call, ret int, l LeaseRef, ttl int, opts []opt) Op {
	o := Op{Kind: kind, Call: ms(call), Return: ms(ret), Result: Ack, Identity: "alice", Lease: l, TTL: ms(ttl)}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// grant: an acquire during [call, ret] answered with l for ttl.
func grant(call, ret int, l LeaseRef, ttl int, opts ...opt) Op {
	return op(Acquire, call, ret, l, ttl, opts)
}
func renew(call, ret int, l LeaseRef, ttl int, opts ...opt) Op {
	return op(Renew, call, ret, l, ttl, opts)
}
func release(call, ret int, l LeaseRef, opts ...opt) Op { return op(Release, call, ret, l, 0, opts) }
func put(call, ret int, l LeaseRef, state string, opts ...opt) Op {
	return op(PutState, call, ret, l, 0, append([]opt{carrying(state)}, opts...))
}

// TestCheckFindsWhatBreaksAPromise: small histories, each legal or
// breaking one promise, and the partitions the check finds illegal.
func TestCheckFindsWhatBreaksAPromise(t *testing.T) {
	a, b, c := lease("px-0", 5), lease("px-0", 105), lease("px-0", 205)
	cfg := Config{
		MaxLeases:    map[string]int{"px-2": 2},
		CooldownBase: time.Second,
		Budgets:      map[string]Budget{"polite.example": {MaxConcurrent: 2, MinInterval: ms(100)}},
	}
	proxies, budgets := "proxies (maxLeases, cool-downs, leases kept)", "domain budgets (maxConcurrent, minInterval)"
	states, sticky := "session state (identity, proxy, domain)", "sticky sessions (identity, session)"
	for name, tc := range map[string]struct {
		history []Op
		illegal []string // model: partition
	}{
		"one lease after another": {history: []Op{
			grant(0, 10, a, 1000), release(20, 30, a), grant(100, 110, b, 1000),
		}},
		"a second lease while the first must live": {history: []Op{
			grant(0, 10, a, 1000), grant(100, 110, b, 1000),
		}, illegal: []string{proxies + ": px-0"}},
		"a second lease once the first may have expired": {history: []Op{
			grant(0, 10, a, 1000), grant(990, 1010, b, 1000),
		}},
		"a grant during the release that freed the proxy": {history: []Op{
			grant(0, 10, a, 1000), release(20, 100, a), grant(50, 60, b, 1000),
		}},
		"a grant before the release was sent": {history: []Op{
			grant(0, 10, a, 1000), grant(50, 60, b, 1000), release(70, 100, a),
		}, illegal: []string{proxies + ": px-0"}},
		"a release whose answer was lost may have freed the proxy": {history: []Op{
			grant(0, 10, a, 1000), release(20, 30, a, result(Unknown)), grant(100, 110, b, 1000),
		}},
		"maxLeases 2 holds two, not three": {history: []Op{
			grant(0, 10, lease("px-2", 5), 1000), grant(20, 30, lease("px-2", 25), 1000), grant(40, 50, lease("px-2", 45), 1000),
		}, illegal: []string{proxies + ": px-2"}},
		"a renewal extends what must live": {history: []Op{
			grant(0, 10, a, 1000), renew(900, 910, a, 1000), grant(1500, 1510, b, 1000),
		}, illegal: []string{proxies + ": px-0"}},
		"a renewal whose answer was lost may not have": {history: []Op{
			grant(0, 10, a, 1000), renew(900, 910, a, 1000, result(Unknown)), grant(1500, 1510, b, 1000),
		}},
		"a lease that must live is found gone": {history: []Op{
			grant(0, 10, a, 1000), renew(100, 110, a, 1000, result(Gone)),
		}, illegal: []string{proxies + ": px-0"}},
		"a lease gone after its TTL": {history: []Op{
			grant(0, 10, a, 1000), renew(1000, 1010, a, 1000, result(Gone)),
		}},
		"a grant for the domain inside its cool-down": {history: []Op{
			grant(0, 10, a, 100, domain("shop.example")), release(20, 30, a, bannedFor("shop.example")),
			grant(500, 510, b, 100, domain("shop.example")),
		}, illegal: []string{proxies + ": px-0"}},
		"a grant for another domain inside the cool-down": {history: []Op{
			grant(0, 10, a, 100, domain("shop.example")), release(20, 30, a, bannedFor("shop.example")),
			grant(500, 510, b, 100, domain("other.example")), release(520, 530, b), grant(540, 550, c, 100),
		}},
		"a grant for the domain after the cool-down": {history: []Op{
			grant(0, 10, a, 100, domain("shop.example")), release(20, 30, a, bannedFor("shop.example")),
			grant(1020, 1030, b, 100, domain("shop.example")),
		}},
		"a ban answered gone may not have been applied": {history: []Op{
			grant(0, 10, a, 100, domain("shop.example")), release(20, 30, a, bannedFor("shop.example"), result(Gone)),
			grant(500, 510, b, 100, domain("shop.example")),
		}},
		"three leases of a domain whose budget holds two": {history: []Op{
			grant(0, 10, lease("px-0", 5), 1000, domain("polite.example")),
			grant(200, 210, lease("px-1", 205), 1000, domain("polite.example")),
			grant(400, 410, lease("px-3", 405), 1000, domain("polite.example")),
		}, illegal: []string{budgets + ": polite.example"}},
		"grants of a domain closer than its minInterval": {history: []Op{
			grant(0, 10, lease("px-0", 5), 1000, domain("polite.example")),
			grant(60, 70, lease("px-1", 65), 1000, domain("polite.example")),
		}, illegal: []string{budgets + ": polite.example"}},
		"grants of a domain that may be minInterval apart": {history: []Op{
			grant(0, 10, lease("px-0", 5), 1000, domain("polite.example")),
			grant(60, 105, lease("px-1", 100), 1000, domain("polite.example")),
		}},
		"a grant carries the state last put": {history: []Op{
			grant(0, 10, a, 100, domain("shop.example")), put(20, 30, a, "jar-1", domain("shop.example")),
			release(40, 50, a), grant(60, 70, b, 100, domain("shop.example"), carrying("jar-1")),
		}},
		"a grant that lost the state put": {history: []Op{
			grant(0, 10, a, 100, domain("shop.example")), put(20, 30, a, "jar-1", domain("shop.example")),
			release(40, 50, a), grant(60, 70, b, 100, domain("shop.example")),
		}, illegal: []string{states + ": alice px-0 shop.example"}},
		"a put whose answer was lost may have kept it, or not": {history: []Op{
			grant(0, 10, a, 100, domain("shop.example")), put(20, 30, a, "jar-1", domain("shop.example"), result(Unknown)),
			release(40, 50, a), grant(60, 70, b, 100, domain("shop.example")),
			release(80, 90, b), grant(100, 110, c, 100, domain("shop.example"), carrying("jar-1")),
		}},
		"a grant carrying state nobody put": {history: []Op{
			grant(0, 10, a, 100, domain("shop.example")), put(20, 30, a, "jar-1", domain("shop.example"), result(Unknown)),
			release(40, 50, a), grant(60, 70, b, 100, domain("shop.example"), carrying("jar-2")),
		}, illegal: []string{states + ": alice px-0 shop.example"}},
		"a ban drops the identity's state": {history: []Op{
			grant(0, 10, a, 100, domain("shop.example")), put(20, 30, a, "jar-1", domain("shop.example")),
			release(40, 50, a, domain("shop.example"), bannedFor("shop.example")),
			grant(1100, 1110, b, 100, domain("shop.example"), carrying("jar-1")),
		}, illegal: []string{states + ": alice px-0 shop.example"}},
		"another identity never sees the state": {history: []Op{
			grant(0, 10, a, 100, domain("shop.example")), put(20, 30, a, "jar-1", domain("shop.example")),
			release(40, 50, a), grant(60, 70, b, 100, domain("shop.example"), as("bob"), carrying("jar-1")),
		}, illegal: []string{states + ": bob px-0 shop.example"}},
		"a session's acquire joins its live lease": {history: []Op{
			grant(0, 10, a, 1000, session("s")), grant(100, 110, a, 1000, session("s")),
			grant(1100, 1110, lease("px-1", 1105), 1000, session("s")),
		}},
		"a session's acquire gets another lease while its own must live": {history: []Op{
			grant(0, 10, a, 1000, session("s")), grant(100, 110, a, 1000, session("s")),
			grant(1050, 1060, lease("px-1", 1055), 1000, session("s")),
		}, illegal: []string{sticky + ": alice s"}},
		"a session's next lease after its release": {history: []Op{
			grant(0, 10, a, 1000, session("s")), release(20, 30, a, session("s")),
			grant(100, 110, lease("px-1", 105), 1000, session("s")),
		}},
	} {
		t.Run(name, func(t *testing.T) {
			r := Check(cfg, tc.history)
			var illegal []string
			for _, v := range r.Violations() {
				illegal = append(illegal, v.Model+": "+v.Partition)
			}
			if diff := cmp.Diff(tc.illegal, illegal); diff != "" {
				t.Errorf("illegal partitions (-want +got):\n%s\n%v", diff, r)
			}
			for _, m := range r.Models {
				if len(m.Unknown) > 0 {
					t.Errorf("%s: out of time on %v", m.Name, m.Unknown)
				}
			}
		})
	}
}
