package operator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clocktesting "k8s.io/utils/clock/testing"
)

// The fence runs from when a write that made us the holder was sent, not
// from when its answer came: a slow renewal must not stretch it.
func TestLeadershipFence(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	const renewDeadline = 10 * time.Second
	const callTakes = 3 * time.Second
	type write struct {
		op     string // "create" or "update"
		holder string
		fails  bool
	}
	for name, tc := range map[string]struct {
		writes []write
		want   time.Time // the fence after them
	}{
		"never held":                    {want: time.Time{}},
		"acquired by create":            {writes: []write{{"create", "me", false}}, want: t0.Add(renewDeadline)},
		"renewed: from the second send": {writes: []write{{"create", "me", false}, {"update", "me", false}}, want: t0.Add(callTakes + renewDeadline)},
		"a failed renewal moves nothing": {
			writes: []write{{"create", "me", false}, {"update", "me", true}, {"update", "me", true}},
			want:   t0.Add(renewDeadline),
		},
		"released: fenced at once": {writes: []write{{"create", "me", false}, {"update", "", false}}, want: time.Time{}},
		"a write naming another holder fences": {
			writes: []write{{"update", "me", false}, {"update", "other", false}},
			want:   time.Time{},
		},
	} {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			fence := newLeadershipFence(clk, renewDeadline)
			inner := &slowLock{clk: clk, takes: callTakes}
			lock := fence.wrap(inner)
			for _, w := range tc.writes {
				inner.fail = w.fails
				rec := resourcelock.LeaderElectionRecord{HolderIdentity: w.holder}
				var err error
				if w.op == "create" {
					err = lock.Create(t.Context(), rec)
				} else {
					err = lock.Update(t.Context(), rec)
				}
				if (err != nil) != w.fails {
					t.Fatalf("%s: err = %v, want failure %v", w.op, err, w.fails)
				}
			}
			if diff := cmp.Diff(tc.want, fence.ValidUntil()); diff != "" {
				t.Errorf("ValidUntil (-want +got):\n%s", diff)
			}
		})
	}
	if (*leadershipFence)(nil).validUntilFunc() != nil {
		t.Errorf("a nil fence (no leader election) must give the store no fence")
	}
}

// slowLock is a lock named "me" whose writes take a while on clk.
type slowLock struct {
	resourcelock.Interface // unused methods panic
	clk                    *clocktesting.FakeClock
	takes                  time.Duration
	fail                   bool
}

func (l *slowLock) write() error {
	l.clk.Step(l.takes)
	if l.fail {
		return errors.New("the API server is unreachable")
	}
	return nil
}

func (l *slowLock) Create(context.Context, resourcelock.LeaderElectionRecord) error { return l.write() }
func (l *slowLock) Update(context.Context, resourcelock.LeaderElectionRecord) error { return l.write() }
func (l *slowLock) Identity() string                                                { return "me" }
