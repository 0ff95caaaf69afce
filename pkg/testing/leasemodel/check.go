package leasemodel

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Config is what the model knows of the fleet.
type Config struct {
	// MaxLeases is each proxy's spec.maxLeases; a proxy not named has 1.
	MaxLeases map[string]int
	// CooldownBase is the first cool-down after a ban (the store's
	// default: a minute); later bans' are longer.
	CooldownBase time.Duration
	// Budgets are the CrawlPolicy rules, by the domain they bind.
	Budgets map[string]Budget
	// Timeout bounds the check of one partition: beyond it, its verdict
	// is porcupine.Unknown. Zero: a minute.
	Timeout time.Duration
}

func (cfg Config) maxLeases(proxy string) int {
	if n, ok := cfg.MaxLeases[proxy]; ok {
		return n
	}
	return 1
}

func (cfg Config) cooldownBase() time.Duration {
	if cfg.CooldownBase == 0 {
		return time.Minute
	}
	return cfg.CooldownBase
}

// Report is a check's verdict on a history.
type Report struct {
	// Ops is the history's length; Unknown how many had no known result.
	Ops, Unknown int
	Models       []ModelReport
}

// ModelReport is one model's verdict.
type ModelReport struct {
	Name string
	// Partitions is how many parts the history was cut into, Largest the
	// most operations one held, Checked how many operations all held (an
	// operation may be in several models, or in none of one).
	Partitions, Largest, Checked int
	Took                         time.Duration
	// Illegal are the partitions no linearization explains; Unknown the
	// ones whose check ran out of time.
	Illegal []Violation
	Unknown []string
}

// Violation is a partition that no order of its operations explains.
type Violation struct {
	Model, Partition string
	// Ops is the partition's size; Explained the longest prefix of a
	// linearization that holds; Next the operations none of those
	// linearizations could take next (the first few, by call).
	Ops, Explained int
	Next           []Op
}

// OK says whether every model found every partition legal.
func (r Report) OK() bool {
	for _, m := range r.Models {
		if len(m.Illegal) > 0 || len(m.Unknown) > 0 {
			return false
		}
	}
	return true
}

// Violations are every model's illegal partitions.
func (r Report) Violations() []Violation {
	var out []Violation
	for _, m := range r.Models {
		out = append(out, m.Illegal...)
	}
	return out
}

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d operations (%d with no known result)", r.Ops, r.Unknown)
	for _, m := range r.Models {
		fmt.Fprintf(&b, "\n  %s: %d partitions (largest %d operations, %d in all) checked in %v: %d illegal, %d unknown",
			m.Name, m.Partitions, m.Largest, m.Checked, m.Took.Round(time.Millisecond), len(m.Illegal), len(m.Unknown))
		for _, v := range m.Illegal {
			fmt.Fprintf(&b, "\n    %s: %d operations, the longest legal prefix %d; none could go on with:", v.Partition, v.Ops, v.Explained)
			for _, op := range v.Next {
				fmt.Fprintf(&b, "\n      %v", op)
			}
		}
		for _, p := range m.Unknown {
			fmt.Fprintf(&b, "\n    %s: out of time", p)
		}
	}
	return b.String()
}

// Check checks history against every model, each partition on its own,
// as many at once as there are CPUs.
func Check(cfg Config, history []Op) Report {
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Minute
	}
	ops := operations(history)
	r := Report{Ops: len(history)}
	for _, op := range history {
		if op.Result == Unknown {
			r.Unknown++
		}
	}
	for _, m := range []struct {
		name  string
		model porcupine.NondeterministicModel
		keys  func(*Op) []string
	}{
		{"proxies (maxLeases, cool-downs, leases kept)", proxyModel(cfg), proxyKeys},
		{"domain budgets (maxConcurrent, minInterval)", budgetModel(cfg), cfg.budgetKeys},
		{"session state (identity, proxy, domain)", stateModel(), stateKeys},
		{"sticky sessions (identity, session)", stickyModel(), stickyKeys},
	} {
		r.Models = append(r.Models, checkModel(cfg, m.name, m.model, partitionsOf(ops, m.keys)))
	}
	return r
}

func checkModel(cfg Config, name string, nm porcupine.NondeterministicModel, p partitioned) ModelReport {
	start := time.Now()
	model := nm.ToModel()
	mr := ModelReport{Name: name, Partitions: len(p.parts)}
	verdicts := make([]porcupine.CheckResult, len(p.parts))
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range next {
				verdicts[i] = porcupine.CheckOperationsTimeout(model, p.parts[i], cfg.Timeout)
			}
		})
	}
	for i, part := range p.parts {
		mr.Largest = max(mr.Largest, len(part))
		mr.Checked += len(part)
		next <- i
	}
	close(next)
	wg.Wait()
	for i, v := range verdicts {
		switch v {
		case porcupine.Illegal:
			mr.Illegal = append(mr.Illegal, explain(cfg, name, p.keys[i], model, p.parts[i]))
		case porcupine.Unknown:
			mr.Unknown = append(mr.Unknown, p.keys[i])
		}
	}
	mr.Took = time.Since(start)
	return mr
}

// explain finds how far an illegal partition's best linearization gets.
func explain(cfg Config, name, key string, model porcupine.Model, part []porcupine.Operation) Violation {
	v := Violation{Model: name, Partition: key, Ops: len(part)}
	_, info := porcupine.CheckOperationsVerbose(model, part, cfg.Timeout)
	var longest []porcupine.Operation
	for _, lins := range info.PartialLinearizationsOperations() {
		for _, lin := range lins {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	v.Explained = len(longest)
	taken := map[*Op]bool{}
	for _, op := range longest {
		taken[op.Input.(*Op)] = true
	}
	for _, op := range part {
		if o := op.Input.(*Op); !taken[o] && len(v.Next) < 3 {
			v.Next = append(v.Next, *o)
		}
	}
	return v
}

// operations are the history as porcupine's operations, an unknown
// result returning at the history's end.
func operations(history []Op) []porcupine.Operation {
	out := make([]porcupine.Operation, len(history))
	for i := range history {
		op := &history[i]
		out[i] = porcupine.Operation{ClientId: op.Client, Input: op, Call: int64(op.Call), Return: int64(op.latest())}
	}
	slices.SortStableFunc(out, func(a, b porcupine.Operation) int { return int(min(max(a.Call-b.Call, -1), 1)) })
	return out
}

// partitioned is a history cut by a key; an operation with several keys
// is in each of their parts (each projection of a linearizable history
// is linearizable, so a part no order explains is a real violation).
type partitioned struct {
	keys  []string
	parts [][]porcupine.Operation
}

func partitionsOf(history []porcupine.Operation, keys func(*Op) []string) partitioned {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range history {
		for _, k := range keys(op.Input.(*Op)) {
			byKey[k] = append(byKey[k], op)
		}
	}
	var p partitioned
	for k := range byKey {
		p.keys = append(p.keys, k)
	}
	slices.Sort(p.keys)
	for _, k := range p.keys {
		p.parts = append(p.parts, byKey[k])
	}
	return p
}

func describe(input, _ interface{}) string { return input.(*Op).String() }
