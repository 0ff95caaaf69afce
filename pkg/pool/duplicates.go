package pool

import (
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// Re-rolling a member that leaves from an older member's exit IP
// (ReasonDuplicateExitIP) gives it a new session and, most likely, another
// address. It cannot help when the range has fewer addresses than the
// members on it, and it helps less with each re-roll when it has barely
// more: re-rolls back off, stop after a bound, and never start when the
// range is too small, each said in the DistinctExitIPs condition with the
// range's size
// (docs/decisions/0422-duplicate-exit-ip-rerolls-back-off-and-stop.md).

// ConditionDistinctExitIPs says whether the pool's members leave from
// distinct exit IPs, and why members that share one are or are not
// re-rolled. It appears with the first duplicate.
const ConditionDistinctExitIPs = "DistinctExitIPs"

// Reasons of ConditionDistinctExitIPs.
const (
	ReasonDistinct         = "Distinct"
	ReasonRerolling        = "Rerolling"
	ReasonRerollBackoff    = "RerollBackoff"
	ReasonRerollsExhausted = "RerollsExhausted"
	ReasonRangeTooSmall    = "RangeTooSmall"
)

// Bounds of the duplicate re-rolls of one pool.
const (
	// DuplicateRerollWindow is how far back re-rolls count.
	DuplicateRerollWindow = time.Hour
	// MaxDuplicateRerolls is how many re-rolls a window allows; then the
	// pool keeps its duplicates until the oldest re-roll leaves the window.
	MaxDuplicateRerolls = 8
	// duplicateRerollBackoff is the wait after the first re-roll of a
	// window, doubled after each further one, up to maxDuplicateRerollBackoff.
	duplicateRerollBackoff    = 30 * time.Second
	maxDuplicateRerollBackoff = 10 * time.Minute
)

// RangeShortage is a set of instances sharing the same exit ranges with
// more active members on them than the ranges have addresses: some of
// those members must share an exit IP, whatever is re-rolled.
type RangeShortage struct {
	Instances []string
	Ranges    []string
	Addresses uint64
	Members   int
}

func (s RangeShortage) String() string {
	return fmt.Sprintf("%d members on %s (%s: %d exit addresses)", s.Members, strings.Join(s.Instances, ", "), strings.Join(s.Ranges, ", "), s.Addresses)
}

// rangeShortages groups the serving instances by their exit ranges (an
// External template makes every instance name the same proxy) and returns
// each group with more active members than addresses, by first instance.
func rangeShortages(instances []Instance, ranges map[string][]string) []RangeShortage {
	groups := map[string]*RangeShortage{}
	for _, in := range instances {
		rs := slices.Sorted(slices.Values(ranges[in.Name]))
		if in.Deleting || len(rs) == 0 {
			continue
		}
		key := strings.Join(rs, ",")
		g := groups[key]
		if g == nil {
			g = &RangeShortage{Ranges: rs, Addresses: ExitAddresses(rs)}
			groups[key] = g
		}
		g.Instances = append(g.Instances, in.Name)
		g.Members += in.Active
	}
	var out []RangeShortage
	for _, key := range slices.Sorted(maps.Keys(groups)) {
		if g := groups[key]; uint64(g.Members) > g.Addresses {
			slices.Sort(g.Instances)
			out = append(out, *g)
		}
	}
	slices.SortFunc(out, func(a, b RangeShortage) int { return strings.Compare(a.Instances[0], b.Instances[0]) })
	return out
}

// ExitAddresses is how many distinct exit addresses sessions can get from
// ranges for targets of one family (the larger of IPv4 and IPv6), by the
// forward-proxy's rule (pkg/forwardproxy's ExitAddr): a range of 4
// addresses or more never gives its first one, nor in IPv4 its last. It
// saturates at math.MaxUint64; a range that does not parse counts none.
func ExitAddresses(ranges []string) uint64 {
	var v4, v6 uint64
	for _, r := range ranges {
		p, err := netip.ParsePrefix(r)
		if err != nil {
			if a, err := netip.ParseAddr(r); err == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			} else {
				continue
			}
		}
		n := rangeAddresses(p)
		if p.Addr().Is4() {
			v4 = saturatingAdd(v4, n)
		} else {
			v6 = saturatingAdd(v6, n)
		}
	}
	return max(v4, v6)
}

func rangeAddresses(p netip.Prefix) uint64 {
	hostBits := p.Addr().BitLen() - p.Bits()
	switch {
	case hostBits < 2:
		return 1 << hostBits
	case hostBits >= 64:
		return math.MaxUint64
	case p.Addr().Is4():
		return 1<<hostBits - 2
	default:
		return 1<<hostBits - 1
	}
}

func saturatingAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// DuplicateVerdict is whether a pool re-rolls its duplicate exit IPs now,
// and what its DistinctExitIPs condition says.
type DuplicateVerdict struct {
	Reroll bool
	// Status and Reason of the condition; Reason "" leaves it as it is.
	Status  metav1.ConditionStatus
	Reason  string
	Message string
	// RecheckAfter is when the verdict changes with time alone (0: never).
	RecheckAfter time.Duration
}

// DecideDuplicates is the verdict for a pool with duplicates members that
// share an older member's exit IP, the shortages of its ranges, and the
// times of its re-rolls (any order), at now. It is pure.
func DecideDuplicates(duplicates int, shortages []RangeShortage, rerolls []time.Time, now time.Time) DuplicateVerdict {
	if duplicates == 0 {
		return DuplicateVerdict{Status: metav1.ConditionTrue, Reason: ReasonDistinct, Message: "every member measured leaves from an exit IP of its own"}
	}
	shared := fmt.Sprintf("%d member(s) leave from an older member's exit IP", duplicates)
	if len(shortages) > 0 {
		var parts []string
		for _, s := range shortages {
			parts = append(parts, s.String())
		}
		return DuplicateVerdict{Status: metav1.ConditionFalse, Reason: ReasonRangeTooSmall, Message: fmt.Sprintf(
			"%s; not re-rolled: %s, so they cannot all differ. Give the instances larger exit ranges or lower spec.membersPerInstance",
			shared, strings.Join(parts, "; "))}
	}
	recent := slices.DeleteFunc(slices.Clone(rerolls), func(t time.Time) bool { return now.Sub(t) >= DuplicateRerollWindow })
	slices.SortFunc(recent, func(a, b time.Time) int { return a.Compare(b) })
	if len(recent) >= MaxDuplicateRerolls {
		resume := recent[len(recent)-MaxDuplicateRerolls].Add(DuplicateRerollWindow)
		return DuplicateVerdict{Status: metav1.ConditionFalse, Reason: ReasonRerollsExhausted, RecheckAfter: resume.Sub(now), Message: fmt.Sprintf(
			"%s after %d re-rolls within %s; not re-rolled again before %s: the exit ranges have too few addresses for these members to differ by chance",
			shared, len(recent), DuplicateRerollWindow, resume.UTC().Format(time.RFC3339))}
	}
	if len(recent) > 0 {
		wait := min(duplicateRerollBackoff<<(len(recent)-1), maxDuplicateRerollBackoff)
		if next := recent[len(recent)-1].Add(wait); now.Before(next) {
			return DuplicateVerdict{Status: metav1.ConditionFalse, Reason: ReasonRerollBackoff, RecheckAfter: next.Sub(now), Message: fmt.Sprintf(
				"%s; %d of %d re-rolls within %s done, the next not before %s", shared, len(recent), MaxDuplicateRerolls, DuplicateRerollWindow, next.UTC().Format(time.RFC3339))}
		}
	}
	return DuplicateVerdict{Reroll: true, Status: metav1.ConditionFalse, Reason: ReasonRerolling, Message: fmt.Sprintf(
		"%s; re-rolling (%d of %d re-rolls within %s done)", shared, len(recent), MaxDuplicateRerolls, DuplicateRerollWindow)}
}

// rerollState keeps each pool's recent duplicate re-rolls (leader memory: a
// new leader starts with none, and re-rolls at most a window's bound more).
type rerollState struct {
	mu    sync.Mutex
	times map[cache.ObjectName][]time.Time
}

func (r *rerollState) recent(key cache.ObjectName, now time.Time) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := slices.DeleteFunc(r.times[key], func(t time.Time) bool { return now.Sub(t) >= DuplicateRerollWindow })
	if len(kept) == 0 {
		delete(r.times, key)
		return nil
	}
	r.times[key] = kept
	return slices.Clone(kept)
}

// record notes the plan's duplicate re-rolls: one per sync that removes
// any, since one sync's removals are one round of re-rolling.
func (r *rerollState) record(key cache.ObjectName, plan Plan, now time.Time) {
	rerolled := slices.ContainsFunc(plan.Drain, func(d Removal) bool { return d.Reason == ReasonDuplicateExitIP }) ||
		slices.ContainsFunc(plan.Delete, func(d Deletion) bool { return d.Reason == ReasonDuplicateExitIP })
	if !rerolled {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.times == nil {
		r.times = map[cache.ObjectName][]time.Time{}
	}
	r.times[key] = append(r.times[key], now)
}

func (r *rerollState) forget(key cache.ObjectName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.times, key)
}

// stageDuplicates sets the DistinctExitIPs condition from v: once a
// duplicate was seen, it stays and says True when they are gone.
func stageDuplicates(pool *crawlv1alpha1.ProxyPool, v DuplicateVerdict) {
	if v.Status == metav1.ConditionTrue && meta.FindStatusCondition(pool.Status.Conditions, ConditionDistinctExitIPs) == nil {
		return
	}
	setCondition(pool, ConditionDistinctExitIPs, v.Status, v.Reason, v.Message)
}
