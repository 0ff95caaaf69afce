package store

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"
)

func mustSelector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

// sameLease is what two answers must share to be one lease.
type sameLease struct {
	Proxy     string
	Slot      int32
	GrantedAt time.Time
}

func identityOf(l Lease) sameLease {
	return sameLease{Proxy: l.Proxy.Key.String(), Slot: l.Slot, GrantedAt: l.GrantedAt}
}

func TestSessionAcquireJoinsTheSessionsLiveLease(t *testing.T) {
	for _, tc := range []struct {
		name string
		// second is the acquire after the first, {Owner: "alice", Session: "s1", Namespace: "crawl"}.
		second   AcquireRequest
		wantSame bool
	}{
		{"same owner, session and namespace: the same lease", AcquireRequest{Owner: "alice", Session: "s1", Namespace: "crawl"}, true},
		{"another owner: a lease of its own", AcquireRequest{Owner: "bob", Session: "s1", Namespace: "crawl"}, false},
		{"another session: a lease of its own", AcquireRequest{Owner: "alice", Session: "s2", Namespace: "crawl"}, false},
		{"no session: a lease of its own", AcquireRequest{Owner: "alice", Namespace: "crawl"}, false},
		{"a selector the proxy does not match: a lease of its own", AcquireRequest{Owner: "alice", Session: "s1", Namespace: "crawl", Selector: mustSelector(t, "n=p2")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clk, _ := newTestStore(t, []ProxyInfo{
				newProxy("p1", inNamespace("crawl"), withLabels("n", "p1")),
				newProxy("p2", inNamespace("crawl"), withLabels("n", "p2")),
			})
			first := acquire(t, s, AcquireRequest{Owner: "alice", Session: "s1", Namespace: "crawl", TTL: 10 * time.Second})
			clk.Step(5 * time.Second)
			tc.second.TTL = 10 * time.Second
			second := acquire(t, s, tc.second)
			if got := identityOf(first) == identityOf(second); got != tc.wantSame {
				t.Fatalf("second acquire got %+v, first %+v: same = %v, want %v", identityOf(second), identityOf(first), got, tc.wantSame)
			}
			if !tc.wantSame {
				return
			}
			// Joining extended the lease; either ID renews and releases it.
			if want := clk.Now().Add(10 * time.Second); !second.ExpiresAt.Equal(want) {
				t.Errorf("joined lease expires at %v, want %v", second.ExpiresAt, want)
			}
			renewed, err := s.RenewAs("alice", first.ID, 0, Report{})
			if err != nil || identityOf(renewed) != identityOf(first) {
				t.Fatalf("renewing the first ID after the join: %+v, %v", renewed, err)
			}
			if err := s.ReleaseAs("alice", second.ID, OutcomeOK, "", Report{}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.GetAs("alice", first.ID); err == nil {
				t.Error("the lease is still live after one of its IDs released it")
			}
		})
	}
}

// A session is its caller's: another identity naming the same session
// neither follows the first one's sticky proxy nor, by the session call's
// ForgetSession, moves it (docs/decisions/0220-gateway-session-belongs-to-its-caller.md).
func TestStickySessionIsPerIdentity(t *testing.T) {
	// The selection order without a sticky choice: least recently
	// released first (never leased before all), then by name.
	s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("p1", inNamespace("crawl")), newProxy("p2", inNamespace("crawl"))})
	use := func(owner, session string) string {
		l := acquire(t, s, AcquireRequest{Owner: owner, Session: session, Namespace: "crawl"})
		clk.Step(time.Second)
		if err := s.ReleaseAs(owner, l.ID, OutcomeOK, "", Report{}); err != nil {
			t.Fatal(err)
		}
		return l.Proxy.Key.Name
	}
	var got []string
	got = append(got, use("alice", "s1"))
	got = append(got, use("bob", "s1"))
	got = append(got, use("carol", "")) // p1 becomes the most recently released
	s.ForgetSession("bob", "crawl", "s1")
	got = append(got, use("alice", "s1"))
	want := []string{
		"p1", // alice: by the order (a tie, by name)
		"p2", // bob: by the order, not alice's sticky p1
		"p1", // carol: by the order
		"p1", // alice: her sticky p1 against the order, although bob forgot "his" s1
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("proxies chosen (-want +got):\n%s", diff)
	}
}

// A new leader knows a session's lease from its renewal, so the session's
// next acquire there joins it instead of taking another proxy, even while
// the new leader recovers and grants nothing new.
func TestNewLeaderRelearnsTheSessionOfALease(t *testing.T) {
	tl := newTwoLeaders(t, newProxy("p1"), newProxy("p2"))
	held := acquire(t, tl.old, AcquireRequest{Owner: "alice", Session: "s1"})
	tl.lead(DefaultTTL)
	tl.clk.Step(time.Second)
	renewed, err := tl.new.RenewAs("alice", held.ID, 0, Report{})
	if err != nil {
		t.Fatalf("Renew on the new leader: %v", err)
	}
	joined := acquire(t, tl.new, AcquireRequest{Owner: "alice", Session: "s1"})
	if diff := cmp.Diff(identityOf(held), identityOf(joined)); diff != "" {
		t.Errorf("the session's acquire on the new leader (-held +got):\n%s", diff)
	}
	if renewed.Session != "s1" || joined.Session != "s1" {
		t.Errorf("sessions: renewed %q, joined %q, want s1", renewed.Session, joined.Session)
	}
}

// Leases without a session keep minting version 2 IDs, which the releases
// before version 4 read, so a rolling upgrade voids no held lease.
func TestOnlySessionLeasesMintVersion4(t *testing.T) {
	s, _, _ := newTestStore(t, []ProxyInfo{newProxy("p1"), newProxy("p2")})
	for _, tc := range []struct {
		session string
		want    byte
	}{{"", tokenVersion}, {"s1", tokenVersionSession}} {
		l := acquire(t, s, AcquireRequest{Session: tc.session})
		raw, err := strictBase64.DecodeString(l.ID)
		if err != nil || raw[0] != tc.want {
			t.Errorf("session %q: ID version %d (%v), want %d", tc.session, raw[0], err, tc.want)
		}
	}
}
