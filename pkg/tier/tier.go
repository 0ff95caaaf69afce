// Package tier decides which tier of proxies, cheapest first, the next
// grant of one crawl-policy budget goes to (docs/tiers.md). It is the
// decision only: a State fed outcomes and the time, with no locks, maps or
// I/O; the lease store keeps one State per budget and applies the answer
// as a label selector.
//
// A budget starts at tier 0. It escalates one tier when, within a window,
// at least MinOutcomes outcomes at its current tier were judged and more
// than BanRateThreshold of them were bans. After QuietPeriod at a tier
// above 0 it probes the tier below with ProbeShare of its grants; once
// MinOutcomes probe outcomes are in, it steps down if their ban rate is at
// most the threshold, else it stays and waits another QuietPeriod.
package tier

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Defaults of Config's fields.
const (
	DefaultWindow           = 2 * time.Minute
	DefaultBanRateThreshold = 0.5
	DefaultMinOutcomes      = 5
	DefaultQuietPeriod      = 10 * time.Minute
	DefaultProbeShare       = 0.05
)

// Config is how a budget moves between tiers.
type Config struct {
	// Window is how long the outcomes at the current tier are counted
	// before the count starts afresh.
	Window time.Duration
	// BanRateThreshold: a ban rate (bans over bans and successes) above it
	// escalates, or fails a probe.
	BanRateThreshold float64
	// MinOutcomes is the least outcomes in a window before it escalates,
	// and the probe outcomes before it steps down.
	MinOutcomes int
	// QuietPeriod is how long a budget stays at a tier above 0 before it
	// probes the tier below, and waits again after a failed probe.
	QuietPeriod time.Duration
	// ProbeShare is the share of grants that go to the tier below while
	// probing, in (0, 1].
	ProbeShare float64
}

// WithDefaults is c with its zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.BanRateThreshold == 0 {
		c.BanRateThreshold = DefaultBanRateThreshold
	}
	if c.MinOutcomes == 0 {
		c.MinOutcomes = DefaultMinOutcomes
	}
	if c.QuietPeriod == 0 {
		c.QuietPeriod = DefaultQuietPeriod
	}
	if c.ProbeShare == 0 {
		c.ProbeShare = DefaultProbeShare
	}
	return c
}

// Validate names the first field (under prefix, e.g. "spec.default.tiering")
// that c, with defaults applied, cannot use.
func (c Config) Validate(prefix string) error {
	c = c.WithDefaults()
	switch {
	case c.Window < time.Second || c.Window > 24*time.Hour:
		return fmt.Errorf("%s.window: must be between 1s and 24h; got %v", prefix, c.Window)
	case c.BanRateThreshold <= 0 || c.BanRateThreshold >= 1:
		return fmt.Errorf("%s.banRateThreshold: must be above 0 and below 1; got %v", prefix, c.BanRateThreshold)
	case c.MinOutcomes < 1 || c.MinOutcomes > 10000:
		return fmt.Errorf("%s.minOutcomes: must be between 1 and 10000; got %d", prefix, c.MinOutcomes)
	case c.QuietPeriod < time.Second || c.QuietPeriod > 24*time.Hour:
		return fmt.Errorf("%s.quietPeriod: must be between 1s and 24h; got %v", prefix, c.QuietPeriod)
	case c.ProbeShare <= 0 || c.ProbeShare > 1:
		return fmt.Errorf("%s.probeShare: must be above 0 and at most 1; got %v", prefix, c.ProbeShare)
	}
	return nil
}

// State is one budget's place among its tiers. Its zero value is tier 0
// with nothing counted. Times are Unix nanoseconds, to keep a State small:
// the store keeps one per default-rule domain.
type State struct {
	// since is when the budget came to its tier, or when its last probe
	// failed: the quiet period counts from it.
	since int64
	// windowStart is when the current window's count began.
	windowStart int64
	// ok and banned count the current window's outcomes at the tier.
	ok, banned int32
	// probeOK and probeBanned count the probe's outcomes at the tier below.
	probeOK, probeBanned int32
	// credit accrues ProbeShare per grant while probing, in millionths; a
	// grant that finds a whole one is a probe.
	credit int32
	// probeStarted: the current probe has had its first grant.
	probeStarted bool
	tier         int8
}

// Tier is the budget's current tier.
func (s *State) Tier() int { return int(s.tier) }

// Choose is the tier for the next grant, and whether that grant is a
// probe of the tier below. It changes nothing: call Granted once the
// grant is made.
func (s *State) Choose(c Config, now time.Time) (tier int, probe bool) {
	if s.probing(c, now) && s.probeCredit(c) >= whole {
		return int(s.tier) - 1, true
	}
	return int(s.tier), false
}

// Granted records a grant that Choose answered, so that probes take only
// their share of the grants.
func (s *State) Granted(c Config, now time.Time, probe bool) {
	if !s.probing(c, now) {
		return
	}
	s.credit, s.probeStarted = s.probeCredit(c), true
	if probe {
		s.credit -= whole
	}
}

// probeCredit is the credit after one more grant. A probe's first grant
// finds a whole credit, so that a probe starts at once rather than after
// 1/share grants.
func (s *State) probeCredit(c Config) int32 {
	if !s.probeStarted {
		return whole
	}
	return s.credit + int32(math.Round(c.ProbeShare*whole))
}

// whole is one probe's credit: shares are counted in millionths, so that
// a 5% share probes exactly every 20th grant.
const whole = 1_000_000

func (s *State) probing(c Config, now time.Time) bool {
	return s.tier > 0 && now.UnixNano()-s.since >= int64(c.QuietPeriod)
}

// Observe counts n outcomes of grants on proxies of tier (banned or not;
// errors are the proxy's, not the site's, and are not counted) and moves
// the budget: up when the current tier's window is over the threshold,
// down when a probe of the tier below passed. tiers is how many there
// are. Outcomes of other tiers (a lease granted before the budget moved)
// are ignored.
func (s *State) Observe(c Config, tiers int, tier int, banned bool, n int64, now time.Time) {
	t := now.UnixNano()
	n32 := int32(min(max(n, 0), 1<<24)) // counts saturate below; a report carries at most 2^20
	switch {
	case tier == int(s.tier):
		if t-s.windowStart >= int64(c.Window) {
			s.windowStart, s.ok, s.banned = t, 0, 0
		}
		if banned {
			s.banned = add(s.banned, n32)
		} else {
			s.ok = add(s.ok, n32)
		}
		if int(s.tier) < tiers-1 && over(c, s.ok, s.banned) {
			s.moveTo(int(s.tier)+1, t)
		}
	case tier == int(s.tier)-1 && s.probing(c, now):
		if banned {
			s.probeBanned = add(s.probeBanned, n32)
		} else {
			s.probeOK = add(s.probeOK, n32)
		}
		if int(s.probeOK+s.probeBanned) < c.MinOutcomes {
			return
		}
		if over(c, s.probeOK, s.probeBanned) {
			s.since, s.probeOK, s.probeBanned, s.credit, s.probeStarted = t, 0, 0, 0, false
			return
		}
		s.moveTo(tier, t)
	}
}

// add is a+b, saturating.
func add(a, b int32) int32 {
	if a > math.MaxInt32-b {
		return math.MaxInt32
	}
	return a + b
}

// over: at least MinOutcomes, and a ban rate above the threshold.
func over(c Config, ok, banned int32) bool {
	total := int64(ok) + int64(banned)
	return total >= int64(c.MinOutcomes) && float64(banned) > c.BanRateThreshold*float64(total)
}

func (s *State) moveTo(tier int, t int64) {
	*s = State{tier: int8(tier), since: t, windowStart: t}
}

// Seed puts a budget the store has just learned of (a leader relearning
// the previous one's live leases) at least at tier, as if it had come
// there now.
func (s *State) Seed(tier int, now time.Time) {
	if tier > int(s.tier) {
		s.moveTo(tier, now.UnixNano())
	}
}

// stateBytes is the length of a State's binary form.
const stateBytes = 8 + 8 + 4*5 + 1 + 1

// AppendBinary appends s's binary form to b: every field, fixed width, so
// that a store's snapshot carries a budget's tier state whole.
func (s State) AppendBinary(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint64(b, uint64(s.since))
	b = binary.BigEndian.AppendUint64(b, uint64(s.windowStart))
	for _, v := range []int32{s.ok, s.banned, s.probeOK, s.probeBanned, s.credit} {
		b = binary.BigEndian.AppendUint32(b, uint32(v))
	}
	started := byte(0)
	if s.probeStarted {
		started = 1
	}
	return append(b, started, byte(s.tier)), nil
}

// UnmarshalBinary reads what AppendBinary wrote.
func (s *State) UnmarshalBinary(b []byte) error {
	if len(b) != stateBytes || b[stateBytes-2] > 1 {
		return fmt.Errorf("tier state: %d bytes, want %d", len(b), stateBytes)
	}
	s.since = int64(binary.BigEndian.Uint64(b))
	s.windowStart = int64(binary.BigEndian.Uint64(b[8:]))
	v := make([]int32, 5)
	for i := range v {
		v[i] = int32(binary.BigEndian.Uint32(b[16+4*i:]))
	}
	s.ok, s.banned, s.probeOK, s.probeBanned, s.credit = v[0], v[1], v[2], v[3], v[4]
	s.probeStarted, s.tier = b[36] == 1, int8(b[37])
	return nil
}
