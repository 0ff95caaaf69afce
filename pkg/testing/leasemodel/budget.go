package leasemodel

import (
	"hash/fnv"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// Budget is a CrawlPolicy rule's limits on one domain.
type Budget struct {
	MaxConcurrent int
	MinInterval   time.Duration
}

// budgetState is one domain's budget: its leases that must live, and the
// earliest time its latest grant may have been decided (hasGrant: there
// is one whose interval may still run).
type budgetState struct {
	floor     time.Duration
	leases    leases
	lastGrant time.Duration
	hasGrant  bool
}

// budgetModel: never more leases for a domain that must live than its
// rule's maxConcurrent, and no grant sooner than minInterval after the
// previous one. Two grants g1 before g2 were decided at d1 >= the latest
// call linearized up to g1, and d2 <= g2's return: g2 returning sooner
// than minInterval after that breaks the rule.
func budgetModel(cfg Config) porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			return partitionsOf(h, cfg.budgetKeys).parts
		},
		Init: func() []interface{} { return []interface{}{budgetState{}} },
		Step: func(state, input, _ interface{}) []interface{} {
			op := input.(*Op)
			return stepBudget(cfg.Budgets[op.Domain], state.(budgetState), op)
		},
		Equal: func(a, b interface{}) bool {
			x, y := a.(budgetState), b.(budgetState)
			return x.floor == y.floor && x.lastGrant == y.lastGrant && x.hasGrant == y.hasGrant && slices.Equal(x.leases, y.leases)
		},
		Hash: func(state interface{}) uint64 {
			s := state.(budgetState)
			h := fnv.New64a()
			writeInt(h, int64(s.floor))
			writeInt(h, int64(s.lastGrant))
			hashLeases(h, s.leases)
			return h.Sum64()
		},
		DescribeOperation: describe,
	}
}

// budgetKeys: the domain of an operation under a budget.
func (cfg Config) budgetKeys(op *Op) []string {
	if _, ok := cfg.Budgets[op.Domain]; !ok || op.Kind == PutState || (op.Kind == Acquire && op.Result != Ack) {
		return nil
	}
	return []string{op.Domain}
}

func stepBudget(b Budget, s budgetState, op *Op) []interface{} {
	s.floor = max(s.floor, op.Call)
	var out []budgetState
	switch op.Kind {
	case Acquire:
		if _, joined := s.leases.find(op.Lease); joined {
			s.leases = s.leases.extended(op.Lease, op.Call+op.TTL)
			out = append(out, s)
			break
		}
		if b.MaxConcurrent > 0 && s.leases.liveAt(op.Return) >= b.MaxConcurrent {
			return nil // beyond maxConcurrent
		}
		if s.hasGrant && op.Return < s.lastGrant+b.MinInterval {
			return nil // sooner than minInterval
		}
		s.leases = s.leases.with(op.Lease, op.Call+op.TTL)
		s.lastGrant, s.hasGrant = s.floor, true
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
			out = append(out, next)
		}
	}
	states := make([]interface{}, 0, len(out))
	for _, next := range out {
		next.leases = next.leases.pruned(next.floor)
		if next.hasGrant && next.lastGrant+b.MinInterval <= next.floor {
			next.lastGrant, next.hasGrant = 0, false
		}
		states = append(states, next)
	}
	return states
}
