package leasemodel

import (
	"hash/fnv"
	"time"

	"github.com/anishathalye/porcupine"
)

// stateModel: session state is a register per identity, proxy and domain.
// A put writes it, a banned release of that identity for the domain
// clears it, and a grant (an acquire without a session, which never
// joins) reads it: it must carry what the register holds.
func stateModel() porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation { return partitionsOf(h, stateKeys).parts },
		Init:      func() []interface{} { return []interface{}{""} },
		Step: func(state, input, _ interface{}) []interface{} {
			return stepState(state.(string), input.(*Op))
		},
		Hash: func(state interface{}) uint64 {
			h := fnv.New64a()
			_, _ = h.Write([]byte(state.(string)))
			return h.Sum64()
		},
		DescribeOperation: describe,
	}
}

func stateKeys(op *Op) []string {
	switch {
	case op.granted() && op.Session == "" && op.Domain != "", op.Kind == PutState:
		return []string{op.Identity + " " + op.Lease.Proxy + " " + op.Domain}
	case op.banned():
		return []string{op.Identity + " " + op.Lease.Proxy + " " + op.BanDomain}
	}
	return nil
}

func stepState(value string, op *Op) []interface{} {
	var written string
	switch op.Kind {
	case Acquire:
		if op.State != value {
			return nil // the grant did not carry the state last put
		}
		return []interface{}{value}
	case PutState:
		written = op.State
	case Release:
		written = "" // the site knows the IP: the identity's state goes
	}
	switch op.Result {
	case Ack:
		return []interface{}{written}
	case Gone, Unknown:
		return []interface{}{value, written}
	}
	return []interface{}{value}
}

// stickyState is a session's lease that must still live (has).
type stickyState struct {
	floor time.Duration
	has   bool
	ref   LeaseRef
	until time.Duration
}

// stickyModel: while a session's lease must live, an acquire of the same
// identity naming the session gets that lease (it joins it, extending it
// to its TTL from then).
func stickyModel() porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation { return partitionsOf(h, stickyKeys).parts },
		Init:      func() []interface{} { return []interface{}{stickyState{}} },
		Step: func(state, input, _ interface{}) []interface{} {
			return stepSticky(state.(stickyState), input.(*Op))
		},
		Equal: func(a, b interface{}) bool {
			x, y := a.(stickyState), b.(stickyState)
			return x.floor == y.floor && x.has == y.has && (!x.has || compareRefs(x.ref, y.ref) == 0 && x.until == y.until)
		},
		Hash: func(state interface{}) uint64 {
			s := state.(stickyState)
			h := fnv.New64a()
			writeInt(h, int64(s.floor))
			if s.has {
				hashLeases(h, leases{{ref: s.ref, until: s.until}})
			}
			return h.Sum64()
		},
		DescribeOperation: describe,
	}
}

func stickyKeys(op *Op) []string {
	if op.Session == "" || op.Kind == PutState || (op.Kind == Acquire && op.Result != Ack) {
		return nil
	}
	return []string{op.Identity + " " + op.Session}
}

func stepSticky(s stickyState, op *Op) []interface{} {
	s.floor = max(s.floor, op.Call)
	mine := s.has && compareRefs(s.ref, op.Lease) == 0
	var out []stickyState
	switch op.Kind {
	case Acquire:
		switch {
		case mine:
			s.until = max(s.until, op.Call+op.TTL)
		case s.has && s.until > op.Return:
			return nil // a new lease while the session's must live
		default:
			s.has, s.ref, s.until = true, op.Lease, op.Call+op.TTL
		}
		out = append(out, s)
	case Renew:
		renewed := s
		if mine {
			renewed.until = op.Call + op.TTL
		}
		switch op.Result {
		case Ack:
			out = append(out, renewed)
		case Gone:
			s.has = s.has && !mine
			out = append(out, s)
		case Unknown:
			out = append(out, s, renewed)
		default:
			out = append(out, s)
		}
	case Release:
		ended, unchanged := released(op)
		if unchanged {
			out = append(out, s)
		}
		if ended {
			next := s
			next.has = s.has && !mine
			out = append(out, next)
		}
	}
	states := make([]interface{}, 0, len(out))
	for _, next := range out {
		if next.has && next.until <= next.floor {
			next = stickyState{floor: next.floor}
		}
		states = append(states, next)
	}
	return states
}
