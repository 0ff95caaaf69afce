package fake

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// FailNext makes the next times calls of op return err, after the errors
// already queued for op (first in, first out). Build err with provider.Quota,
// provider.Permanent or provider.Transient; it is returned as is. A call that
// fails this way changes nothing, and it draws no random fault.
func (p *Provider) FailNext(op Op, err error, times int) {
	if err == nil {
		panic("fake: FailNext with a nil error")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for range times {
		p.failNext[op] = append(p.failNext[op], err)
	}
}

// FailNextAfter makes the next times calls of op that succeed take effect
// and then return err, as when a provider did the work but its answer was lost
// (a timeout, a dropped connection): a Create that fails this way leaves an
// instance whose ID the caller never learned. The errors queue first in, first
// out, after those already queued for op. A call that fails anyway (FailNext,
// a random fault, its context, quota, a Get of a missing instance) does not
// use one.
func (p *Provider) FailNextAfter(op Op, err error, times int) {
	if err == nil {
		panic("fake: FailNextAfter with a nil error")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for range times {
		p.failAfter[op] = append(p.failAfter[op], err)
	}
}

// answer is what a call of op that took effect returns: the next
// FailNextAfter error for op, or nil. Runs under p.mu.
func (p *Provider) answer(op Op) error {
	err, rest := popError(p.failAfter[op])
	if err != nil {
		p.failAfter[op] = rest
	}
	return err
}

// popError takes the first of a queue of programmed errors: nil when there
// is none. The backing array keeps no reference to it.
func popError(q []error) (first error, rest []error) {
	if len(q) == 0 {
		return nil, q
	}
	first = q[0]
	q[0] = nil
	return first, q[1:]
}

// HoldNextCreates makes the next times Creates of a new name fail with err
// and make their instance only at ReleaseHeld, as a cloud that acted late on a
// request its caller saw fail (a timeout): the instance appears when nobody
// waits for it any more. A Create of the name before the release makes the
// instance at once, and the held request is dropped; a Delete of the name
// before the release finds nothing. Creates that fail anyway (FailNext, a
// random fault, quota) or find their name existing do not use one.
func (p *Provider) HoldNextCreates(err error, times int) {
	if err == nil {
		panic("fake: HoldNextCreates with a nil error")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for range times {
		p.holdNext = append(p.holdNext, err)
	}
}

// ReleaseHeld makes the instances of the held Creates appear, as Create
// would have made them now, and returns how many did.
func (p *Provider) ReleaseHeld() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	n := 0
	for _, name := range slices.Sorted(maps.Keys(p.held)) {
		if p.lookup(name, now) == nil {
			p.instances[name] = p.newRecord(p.held[name], now)
			n++
		}
	}
	clear(p.held)
	return n
}

// SetRandomFaults makes every call (of every op) without a FailNext error
// fail with probability rate, with a class picked uniformly from classes:
// provider.ErrQuotaExceeded, provider.ErrPermanent and/or
// provider.ErrTransient; nil or empty means all three (the error's message
// names its class: "injected random permanent fault"). The draws come from a
// PCG generator seeded with seed, so a sequence of calls fails the same way
// on every run. Rate 0 turns random faults off. It panics on a rate outside
// [0, 1] or an unknown class.
func (p *Provider) SetRandomFaults(rate float64, classes []error, seed int64) {
	if rate < 0 || rate > 1 {
		panic(fmt.Sprintf("fake: fault rate %v outside [0, 1]", rate))
	}
	if len(classes) == 0 {
		classes = []error{provider.ErrQuotaExceeded, provider.ErrPermanent, provider.ErrTransient}
	}
	for _, c := range classes {
		switch c {
		case provider.ErrQuotaExceeded, provider.ErrPermanent, provider.ErrTransient:
		default:
			panic(fmt.Sprintf("fake: %v is not a provider error class", c))
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faultRate = rate
	p.faultErrs = slices.Clone(classes)
	p.rng = rand.New(rand.NewPCG(uint64(seed), 0x70726f7879))
}

// ResetFaults forgets every error queued by FailNext, FailNextAfter and
// HoldNextCreates and turns random faults off: from now on calls fail only by
// their own logic (quota, a missing instance, their context). Creates already
// held stay held until ReleaseHeld.
func (p *Provider) ResetFaults() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failNext = map[Op][]error{}
	p.failAfter = map[Op][]error{}
	p.holdNext = nil
	p.faultRate = 0
}

// SetQuota makes Create of a new name fail with a provider.Quota error while
// the fake holds n instances or more. Every instance it holds counts:
// Provisioning, Running, Stopped, injected, and deleted ones until their
// deletion delay has passed. Create of an existing name still returns it. A
// negative n, the default, means no quota.
func (p *Provider) SetQuota(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.quota = n
}
