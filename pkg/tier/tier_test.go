package tier

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// step is one event of a scenario, at an offset from t0: n outcomes at a
// tier (ok or banned), or a grant (Choose then Granted).
type step struct {
	at     time.Duration
	grant  bool
	tier   int
	banned bool
	n      int64
}

func outcomes(at time.Duration, tier int, banned bool, n int64) step {
	return step{at: at, tier: tier, banned: banned, n: n}
}

func grant(at time.Duration) step { return step{at: at, grant: true} }

func TestStateMovesBetweenTiers(t *testing.T) {
	cfg := Config{}.WithDefaults() // 2m window, 0.5, 5 outcomes, 10m quiet, 5%
	tests := map[string]struct {
		tiers int
		steps []step
		// want is the tier after each step; for a grant, the tier it went
		// to, with "p" when it was a probe.
		want []string
	}{
		"bans over the threshold with enough outcomes escalate": {
			tiers: 2,
			steps: []step{outcomes(0, 0, true, 3), outcomes(time.Second, 0, false, 1), outcomes(2*time.Second, 0, true, 1)},
			want:  []string{"0", "0", "1"},
		},
		"a ban rate at the threshold does not escalate": {
			tiers: 2,
			steps: []step{outcomes(0, 0, true, 3), outcomes(0, 0, false, 3)},
			want:  []string{"0", "0"},
		},
		"bans spread over two windows do not add up": {
			tiers: 2,
			steps: []step{outcomes(0, 0, true, 4), outcomes(2*time.Minute, 0, true, 4)},
			want:  []string{"0", "0"},
		},
		"the top tier does not escalate further": {
			tiers: 2,
			steps: []step{outcomes(0, 0, true, 5), outcomes(time.Second, 1, true, 50)},
			want:  []string{"1", "1"},
		},
		"outcomes of another tier are ignored": {
			tiers: 3,
			steps: []step{outcomes(0, 0, true, 5), outcomes(time.Second, 0, true, 50), outcomes(2*time.Second, 2, true, 50)},
			want:  []string{"1", "1", "1"},
		},
		"no probe before the quiet period": {
			tiers: 2,
			steps: []step{outcomes(0, 0, true, 5), grant(10*time.Minute - time.Nanosecond)},
			want:  []string{"1", "1"},
		},
		"a probe takes the first grant after the quiet period, then its share": {
			tiers: 2,
			steps: append([]step{outcomes(0, 0, true, 5)}, grants(10*time.Minute, 41)...),
			want:  append([]string{"1", "0p"}, probeEvery20(40)...),
		},
		"probes that succeed step down": {
			tiers: 2,
			steps: []step{outcomes(0, 0, true, 5), grant(10 * time.Minute), outcomes(10*time.Minute+time.Second, 0, false, 4),
				outcomes(10*time.Minute+2*time.Second, 0, true, 1)},
			want: []string{"1", "0p", "1", "0"},
		},
		"probes that are banned keep the tier and wait another quiet period": {
			tiers: 2,
			steps: []step{outcomes(0, 0, true, 5), grant(10 * time.Minute), outcomes(11*time.Minute, 0, true, 5),
				grant(11 * time.Minute), grant(21*time.Minute - time.Nanosecond), grant(21 * time.Minute)},
			want: []string{"1", "0p", "1", "1", "1", "0p"},
		},
		"stepping down from the third tier goes one tier at a time": {
			tiers: 3,
			steps: []step{outcomes(0, 0, true, 5), outcomes(time.Minute, 1, true, 5), outcomes(11*time.Minute, 1, false, 5),
				grant(11 * time.Minute), grant(21 * time.Minute)},
			want: []string{"1", "2", "1", "1", "0p"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var s State
			var got []string
			for _, st := range tc.steps {
				now := t0.Add(st.at)
				if !st.grant {
					s.Observe(cfg, tc.tiers, st.tier, st.banned, st.n, now)
					got = append(got, itoa(s.Tier()))
					continue
				}
				tier, probe := s.Choose(cfg, now)
				s.Granted(cfg, now, probe)
				g := itoa(tier)
				if probe {
					g += "p"
				}
				got = append(got, g)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("tiers (-want +got):\n%s", diff)
			}
		})
	}
}

func grants(at time.Duration, n int) []step {
	var out []step
	for range n {
		out = append(out, grant(at))
	}
	return out
}

// probeEvery20 is what n grants after a probe's first go to at a 5% share.
func probeEvery20(n int) []string {
	var out []string
	for i := 1; i <= n; i++ {
		if i%20 == 0 {
			out = append(out, "0p")
		} else {
			out = append(out, "1")
		}
	}
	return out
}

func itoa(i int) string { return string(rune('0' + i)) }

func TestConfigValidateNamesTheField(t *testing.T) {
	tests := map[string]struct {
		cfg  Config
		want string // a substring of the error; "" for none
	}{
		"defaults":        {cfg: Config{}},
		"short window":    {cfg: Config{Window: time.Millisecond}, want: "spec.default.tiering.window"},
		"threshold of 1":  {cfg: Config{BanRateThreshold: 1}, want: "spec.default.tiering.banRateThreshold"},
		"negative min":    {cfg: Config{MinOutcomes: -1}, want: "spec.default.tiering.minOutcomes"},
		"long quiet":      {cfg: Config{QuietPeriod: 25 * time.Hour}, want: "spec.default.tiering.quietPeriod"},
		"share above one": {cfg: Config{ProbeShare: 1.5}, want: "spec.default.tiering.probeShare"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.cfg.Validate("spec.default.tiering")
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate: %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestSeedRaisesOnly(t *testing.T) {
	cfg := Config{}.WithDefaults()
	var s State
	s.Seed(1, t0)
	s.Seed(0, t0)
	if got, _ := s.Choose(cfg, t0.Add(time.Minute)); got != 1 {
		t.Errorf("after Seed(1), Seed(0): tier %d, want 1", got)
	}
	if got, probe := s.Choose(cfg, t0.Add(10*time.Minute)); got != 0 || !probe {
		t.Errorf("a quiet period after a seed: tier %d probe %v, want a probe of 0", got, probe)
	}
}

func TestStateBinaryRoundTrip(t *testing.T) {
	var s State
	c := Config{MinOutcomes: 2}.WithDefaults()
	now := time.Unix(1_800_000_000, 0)
	s.Observe(c, 3, 0, true, 5, now)
	s.Granted(c, now.Add(time.Minute), false)
	s.Observe(c, 3, 1, false, 1, now.Add(2*time.Minute))
	b, err := s.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	var got State
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if got != s {
		t.Errorf("round trip: %+v, want %+v", got, s)
	}
	if err := got.UnmarshalBinary(b[1:]); err == nil {
		t.Error("a short state decoded")
	}
}
