package store

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

// followerJournal hands a leader's effects to a follower as they come,
// leaving out the renewals a replica may leave out.
type followerJournal struct {
	follower *Store
	skipped  int
}

func (j *followerJournal) Append(b []byte, renewal bool) {
	if renewal {
		j.skipped++
		return
	}
	e, err := DecodeEffect(b)
	if err != nil {
		panic(err)
	}
	j.follower.Apply(e)
}

func (j *followerJournal) Seal() Pending { return nil }

// TestPromotedFollowerEndsNoLeaseEarly: a follower that saw a lease's grant
// but not its renewals (left out of the log) becomes the store that
// decides: the lease lives on to at least its TTL plus the skew from the
// promotion, renews with the ID the old leader gave last, the cool-down
// the old leader started ends no earlier, and new grants carry a new epoch.
func TestPromotedFollowerEndsNoLeaseEarly(t *testing.T) {
	const skew = 2 * time.Second
	clk := clocktesting.NewFakeClock(t0)
	follower, _, _ := newTestStore(t, nil, withStoreConfig(func(c *Config) { c.Follower, c.Clock = true, clk }))
	j := &followerJournal{follower: follower}
	leader, _, _ := newTestStore(t, []ProxyInfo{newProxy("p1"), newProxy("p2", withLatency(20))}, withStoreConfig(func(c *Config) { c.Journal, c.Clock = j, clk }))
	follower.Apply(ProxyPut{info: newProxy("p1")}, ProxyPut{info: newProxy("p2", withLatency(20))}, TermStart{epoch: leader.st.term.epoch})

	held := acquire(t, leader, AcquireRequest{TTL: 10 * time.Second})
	banned := acquire(t, leader, AcquireRequest{Domain: "shop.example"})
	if err := leader.ReleaseAs("", banned.ID, OutcomeBanned, "", Report{}); err != nil {
		t.Fatal(err)
	}
	for range 5 { // renewed on the leader, never logged
		clk.Step(5 * time.Second)
		var err error
		if held, err = leader.RenewAs("", held.ID, 0, Report{}); err != nil {
			t.Fatal(err)
		}
	}
	if j.skipped != 5 {
		t.Fatalf("%d renewals left out of the log, want 5", j.skipped)
	}
	// The leader is gone; 25 s after the grant the follower's copy of the
	// lease expired 15 s ago on its face. Promoted now, it ends no lease.
	if err := follower.Promote(skew); err != nil {
		t.Fatal(err)
	}
	got, err := follower.GetAs("", held.ID)
	if err != nil {
		t.Fatalf("the lease after the promotion: %v", err)
	}
	if want := clk.Now().Add(10*time.Second + skew); !got.ExpiresAt.Equal(want) {
		t.Errorf("expires at %v, want %v (its TTL and the skew from the promotion)", got.ExpiresAt, want)
	}
	if _, err := follower.RenewAs("", held.ID, 0, Report{}); err != nil {
		t.Errorf("renewing with the old leader's last ID: %v", err)
	}
	cooling, err := follower.CoolingDown(1)
	if err != nil {
		t.Fatal(err)
	}
	wantCooling := map[ObjectName]Cooling{banned.Proxy.Key: {Total: 1, Domains: []DomainCooldown{{Domain: "shop.example", Until: t0.Add(time.Minute + skew)}}}}
	if diff := cmp.Diff(wantCooling, cooling); diff != "" {
		t.Errorf("cool-downs after the promotion (-want +got):\n%s", diff)
	}
	next := acquire(t, follower, AcquireRequest{})
	tok, _ := follower.signer.decode(next.ID)
	if tok.key.epoch <= leader.st.term.epoch {
		t.Errorf("a grant after the promotion has epoch %d, the old leader's was %d", tok.key.epoch, leader.st.term.epoch)
	}
	// A store that was promoted decides; one still following answers that it does not lead.
	other, _, _ := newTestStore(t, nil, withStoreConfig(func(c *Config) { c.Follower = true }))
	if _, err := other.List(LeaseFilter{}); !errors.Is(err, ErrNotLeader) {
		t.Errorf("a follower's List: %v, want ErrNotLeader", err)
	}
}

// TestAcquireSentAgainGetsTheSameLease: an acquire that names itself gets,
// sent again, the live lease it got; another identity's request of the
// same name is its own; once the lease has ended, the name is free again.
func TestAcquireSentAgainGetsTheSameLease(t *testing.T) {
	s, _, _ := newTestStore(t, []ProxyInfo{newProxy("p1"), newProxy("p2"), newProxy("p3")})
	first := acquire(t, s, AcquireRequest{Owner: "alice", RequestID: "r1"})
	again := acquire(t, s, AcquireRequest{Owner: "alice", RequestID: "r1"})
	other := acquire(t, s, AcquireRequest{Owner: "bob", RequestID: "r1"})
	if again.ID != first.ID || again.Proxy.Key != first.Proxy.Key {
		t.Errorf("sent again: %s on %s, want %s on %s", again.ID, again.Proxy.Key, first.ID, first.Proxy.Key)
	}
	if other.Proxy.Key == first.Proxy.Key {
		t.Errorf("another identity's request of the same name got alice's lease")
	}
	if err := s.ReleaseAs("alice", first.ID, OutcomeOK, "", Report{}); err != nil {
		t.Fatal(err)
	}
	if next := acquire(t, s, AcquireRequest{Owner: "alice", RequestID: "r1"}); next.ID == first.ID {
		t.Errorf("after the release the same request got the released lease")
	}
	if _, err := s.Acquire(t.Context(), AcquireRequest{Holder: "w", RequestID: string(make([]byte, MaxRequestIDLen+1))}); err == nil {
		t.Error("an overlong request ID was accepted")
	}
}

// countingJournal counts the effects a store logs.
type countingJournal struct{ effects int }

func (j *countingJournal) Append([]byte, bool) { j.effects++ }
func (j *countingJournal) Seal() Pending       { return nil }

// TestUnchangedPutsLogNothing: the feed's resync puts every proxy and
// policy again; one that changed nothing must not become a log entry.
func TestUnchangedPutsLogNothing(t *testing.T) {
	j := &countingJournal{}
	p := newProxy("p1")
	st, _, _ := newTestStore(t, []ProxyInfo{p}, withStoreConfig(func(c *Config) { c.Journal = j }))
	policy := CrawlPolicy{Key: ObjectName{testNamespace, "polite"}, Default: &DomainLimits{MaxConcurrent: 2}}
	st.SetCrawlPolicy(policy)
	before := j.effects
	st.Upsert(p)
	st.SetCrawlPolicy(CrawlPolicy{Key: ObjectName{testNamespace, "polite"}, Default: &DomainLimits{MaxConcurrent: 2}})
	if j.effects != before {
		t.Errorf("putting an unchanged proxy and policy logged %d effects, want none", j.effects-before)
	}
	p.Labels = map[string]string{"tier": "b"}
	st.Upsert(p)
	st.SetCrawlPolicy(CrawlPolicy{Key: ObjectName{testNamespace, "polite"}, Default: &DomainLimits{MaxConcurrent: 3}})
	if got := j.effects - before; got < 2 {
		t.Errorf("changing a proxy and a policy logged %d effects, want at least 2", got)
	}
}

// TestPromotionKeepsARecoveryGoing: a group regrouped after a lost quorum
// recovers until its horizon has passed; a leader that takes over in the
// meantime goes on recovering to the same end, then grants.
func TestPromotionKeepsARecoveryGoing(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	follower, _, _ := newTestStore(t, nil, withStoreConfig(func(c *Config) { c.Follower, c.Clock = true, clk }))
	j := &followerJournal{follower: follower}
	leader, _, _ := newTestStore(t, []ProxyInfo{newProxy("p1")}, withStoreConfig(func(c *Config) { c.Journal, c.Clock = j, clk }))
	follower.Apply(ProxyPut{info: newProxy("p1")})
	recoverUntil := t0.Add(time.Minute)
	leader.Lead(recoverUntil, time.Time{})

	clk.Step(10 * time.Second)
	if err := follower.Promote(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := follower.Acquire(t.Context(), AcquireRequest{Holder: "w"}); !errors.Is(err, ErrRecovering) {
		t.Fatalf("acquire on the promoted follower during the recovery: %v, want ErrRecovering", err)
	}
	clk.SetTime(recoverUntil.Add(time.Millisecond))
	acquire(t, follower, AcquireRequest{})
}
