package leasemodel

import (
	"cmp"
	"hash/fnv"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// The models, one per promise, each a porcupine.NondeterministicModel over
// one partition of the history: an operation whose result is Unknown (or
// a release answered Gone, which its own lost first sending may have
// applied) steps to both states, taken and not taken. Each model carries
// floor, the latest call among the operations linearized so far: every
// later linearization point is at or after it, so what ends by floor can
// no longer matter and is dropped (a function of the linearized set, so
// porcupine's cache is not split by it).
//
// A lease is held in a model while it must still live: until the call of
// its latest acknowledged grant, join or renewal plus the TTL. An
// operation at or after that may find it ended; one that returned before
// it must not.

// liveLease is a lease that must live until until.
type liveLease struct {
	ref   LeaseRef
	until time.Duration
}

// leases are the leases that must still live, sorted by ref.
type leases []liveLease

func compareRefs(a, b LeaseRef) int {
	return cmp.Or(cmp.Compare(a.Proxy, b.Proxy), a.GrantedAt.Compare(b.GrantedAt))
}

func (ls leases) find(ref LeaseRef) (int, bool) {
	return slices.BinarySearchFunc(ls, ref, func(l liveLease, r LeaseRef) int { return compareRefs(l.ref, r) })
}

// with is ls with ref living until until (added or replaced).
func (ls leases) with(ref LeaseRef, until time.Duration) leases {
	i, found := ls.find(ref)
	out := slices.Clone(ls)
	if found {
		out[i].until = until
		return out
	}
	return slices.Insert(out, i, liveLease{ref: ref, until: until})
}

// extended is ls with ref living at least until until.
func (ls leases) extended(ref LeaseRef, until time.Duration) leases {
	if i, found := ls.find(ref); found && ls[i].until >= until {
		return ls
	}
	return ls.with(ref, until)
}

func (ls leases) without(ref LeaseRef) leases {
	i, found := ls.find(ref)
	if !found {
		return ls
	}
	return slices.Delete(slices.Clone(ls), i, i+1)
}

// liveAt counts the leases that must live at at.
func (ls leases) liveAt(at time.Duration) int {
	n := 0
	for _, l := range ls {
		if l.until > at {
			n++
		}
	}
	return n
}

// mustLiveAt says whether ref must live at at.
func (ls leases) mustLiveAt(ref LeaseRef, at time.Duration) bool {
	i, found := ls.find(ref)
	return found && ls[i].until > at
}

func (ls leases) pruned(floor time.Duration) leases {
	if !slices.ContainsFunc(ls, func(l liveLease) bool { return l.until <= floor }) {
		return ls
	}
	return slices.DeleteFunc(slices.Clone(ls), func(l liveLease) bool { return l.until <= floor })
}

// renewed is what a renewal leaves of the leases that must live: the
// states it may leave, none if the history is not legal (a lease that
// must live was found gone).
func (ls leases) renewed(op *Op) []leases {
	renewed := ls.with(op.Lease, op.Call+op.TTL)
	switch op.Result {
	case Ack:
		return []leases{renewed}
	case Gone:
		if ls.mustLiveAt(op.Lease, op.Return) {
			return nil
		}
		return []leases{ls.without(op.Lease)}
	case Unknown:
		return []leases{ls, renewed}
	}
	return []leases{ls}
}

// released says which states a release may leave: the lease ended, or
// unchanged (a refused release; either for an unknown result).
func released(op *Op) (ended, unchanged bool) {
	switch op.Result {
	case Ack, Gone:
		return true, false
	case Unknown:
		return true, true
	}
	return false, true
}

func hashLeases(h interface{ Write([]byte) (int, error) }, ls leases) {
	for _, l := range ls {
		_, _ = h.Write([]byte(l.ref.Proxy))
		writeInt(h, l.ref.GrantedAt.UnixNano())
		writeInt(h, int64(l.until))
	}
}

func writeInt(h interface{ Write([]byte) (int, error) }, v int64) {
	var b [8]byte
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	_, _ = h.Write(b[:])
}

// proxyState is one proxy's: its leases that must live, and its
// cool-downs by domain that must still hold.
type proxyState struct {
	floor     time.Duration
	leases    leases
	cooldowns []cooldown // sorted by domain
}

type cooldown struct {
	domain string
	until  time.Duration
}

// proxyModel: never more leases on a proxy that must live than its
// maxLeases; no grant for a domain inside its cool-down; no lease that
// must live is found gone.
func proxyModel(cfg Config) porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation { return partitionsOf(h, proxyKeys).parts },
		Init:      func() []interface{} { return []interface{}{proxyState{}} },
		Step: func(state, input, _ interface{}) []interface{} {
			return stepProxy(cfg, state.(proxyState), input.(*Op))
		},
		Equal: func(a, b interface{}) bool {
			x, y := a.(proxyState), b.(proxyState)
			return x.floor == y.floor && slices.Equal(x.leases, y.leases) && slices.Equal(x.cooldowns, y.cooldowns)
		},
		Hash: func(state interface{}) uint64 {
			s := state.(proxyState)
			h := fnv.New64a()
			writeInt(h, int64(s.floor))
			hashLeases(h, s.leases)
			for _, c := range s.cooldowns {
				_, _ = h.Write([]byte(c.domain))
				writeInt(h, int64(c.until))
			}
			return h.Sum64()
		},
		DescribeOperation: describe,
	}
}

// proxyKeys: an acquire's granted proxy, the lease's proxy of the others.
func proxyKeys(op *Op) []string {
	if op.Kind == PutState || (op.Kind == Acquire && op.Result != Ack) {
		return nil
	}
	return []string{op.Lease.Proxy}
}

func stepProxy(cfg Config, s proxyState, op *Op) []interface{} {
	s.floor = max(s.floor, op.Call)
	var out []proxyState
	switch op.Kind {
	case Acquire:
		if _, joined := s.leases.find(op.Lease); joined {
			s.leases = s.leases.extended(op.Lease, op.Call+op.TTL)
			out = append(out, s)
			break
		}
		if s.leases.liveAt(op.Return) >= cfg.maxLeases(op.Lease.Proxy) {
			return nil // more leases than maxLeases
		}
		if op.Domain != "" && coolingUntil(s.cooldowns, op.Domain) > op.Return {
			return nil // granted inside a cool-down
		}
		s.leases = s.leases.with(op.Lease, op.Call+op.TTL)
		out = append(out, s)
	case Renew:
		for _, ls := range s.leases.renewed(op) {
			next := s
			next.leases = ls
			out = append(out, next)
		}
	case Release:
		ended, unchanged := released(op)
		if unchanged {
			out = append(out, s)
		}
		if ended {
			next := s
			next.leases = s.leases.without(op.Lease)
			if op.Result == Gone {
				// Gone: the lease had ended before (no ban), or a lost
				// first sending of this release ended it, ban and all.
				out = append(out, next)
			}
			if op.banned() {
				next.cooldowns = banned(s.cooldowns, op.BanDomain, op.Call+cfg.cooldownBase())
			}
			out = append(out, next)
		}
	}
	states := make([]interface{}, 0, len(out))
	for _, p := range out {
		p.leases = p.leases.pruned(p.floor)
		p.cooldowns = slices.DeleteFunc(slices.Clone(p.cooldowns), func(c cooldown) bool { return c.until <= p.floor })
		states = append(states, p)
	}
	return states
}

func coolingUntil(cs []cooldown, domain string) time.Duration {
	if i, found := slices.BinarySearchFunc(cs, domain, func(c cooldown, d string) int { return cmp.Compare(c.domain, d) }); found {
		return cs[i].until
	}
	return 0
}

// banned is cs with domain cooling down at least until until.
func banned(cs []cooldown, domain string, until time.Duration) []cooldown {
	i, found := slices.BinarySearchFunc(cs, domain, func(c cooldown, d string) int { return cmp.Compare(c.domain, d) })
	out := slices.Clone(cs)
	if found {
		out[i].until = max(out[i].until, until)
		return out
	}
	return slices.Insert(out, i, cooldown{domain: domain, until: until})
}
