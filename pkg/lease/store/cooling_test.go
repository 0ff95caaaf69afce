package store

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCoolingDownListsTheDomainsInForce(t *testing.T) {
	s, clk, _ := newTestStore(t, []ProxyInfo{newProxy("p1")})
	banAt := func(domain string) ObjectName {
		t.Helper()
		l := acquire(t, s, AcquireRequest{Domain: domain})
		if err := s.ReleaseAs("", l.ID, OutcomeBanned, "", Report{}); err != nil {
			t.Fatal(err)
		}
		return l.Proxy.Key
	}
	first := banAt("a.example")
	clk.Step(10 * time.Second)
	if got := banAt("b.example"); got != first {
		t.Fatalf("the second ban went to %s, want %s (the only proxy)", got, first)
	}
	clk.Step(10 * time.Second)
	if got := banAt("c.example"); got != first {
		t.Fatalf("the third ban went to %s, want %s", got, first)
	}
	got, err := s.CoolingDown(2)
	if err != nil {
		t.Fatal(err)
	}
	want := map[ObjectName]Cooling{first: {Total: 3, Domains: []DomainCooldown{ // the latest-ending two
		{Domain: "c.example", Until: t0.Add(20*time.Second + time.Minute)},
		{Domain: "b.example", Until: t0.Add(10*time.Second + time.Minute)},
	}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CoolingDown (-want +got):\n%s", diff)
	}
	clk.Step(55 * time.Second) // t0+75s: a's (t0+60s) and b's (t0+70s) ended, c's (t0+80s) not
	got, _ = s.CoolingDown(2)
	if n := got[first].Total; n != 1 || got[first].Domains[0].Domain != "c.example" {
		t.Errorf("after two ended: %+v, want c.example alone", got[first])
	}
	s.Abdicate()
	if _, err := s.CoolingDown(2); !errors.Is(err, ErrNotLeader) {
		t.Errorf("a standby's CoolingDown: err = %v, want ErrNotLeader", err)
	}
}
