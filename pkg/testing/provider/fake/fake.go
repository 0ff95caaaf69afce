// Package fake is an in-memory provider.Provider with fault injection: a test
// double for the controller's unit tests and for integration tests against a
// real API server.
//
// It keeps instances in a map guarded by one mutex, so it is safe for
// concurrent use, and it is deterministic when the test makes it so: time comes
// from an injectable clock (WithClock), addresses from a counter or a function
// (WithAddress), and random faults from a seeded generator (SetRandomFaults).
// Tests program failures per operation (FailNext, or FailNextAfter for a call
// that takes effect and then fails, or HoldNextCreates for a Create that
// fails and takes effect later), cap the number of instances
// (SetQuota), change instances behind the controller's back (Stop, Vanish,
// Inject) and inspect what the fake received (Calls, CreateRequests) and what
// it holds (Instances, Instance).
//
// It is not a simulation of any real cloud: there are no zones, no machine
// types, no network, and nothing listens at the addresses it reports unless
// the test starts something there (see WithAddress). State changes happen
// only when the fake is observed: an instance becomes Running, or disappears
// after Delete, at the first call that looks at it after its delay has passed;
// no goroutine runs in the background, and nothing is ever pushed to the
// caller. It is not meant for production use.
package fake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// Op names a Provider method, for FailNext and Calls.
type Op string

// The operations of provider.Provider.
const (
	OpCreate Op = "Create"
	OpGet    Op = "Get"
	OpDelete Op = "Delete"
	OpList   Op = "ListByTag"
)

// Call is one call the fake received, recorded before anything else happens
// (before latency, context checks and faults), so failed calls are recorded
// too.
type Call struct {
	Op Op
	// ID is the name for Create, the id for Get and Delete, and "key=value"
	// for ListByTag.
	ID string
}

// The messages the fake puts in Instance.Message.
const (
	MessageProvisioning = "provisioning"
	MessageRunning      = "running"
	MessagePreempted    = "preempted"
	MessageDeleting     = "deleting"
)

// DefaultPort is the port of the default address function.
const DefaultPort int32 = 3128

// Option configures a Provider in New.
type Option func(*Provider)

// WithClock sets the clock the delays are measured with; default the real
// clock. With a fake clock (k8s.io/utils/clock/testing), step it to make
// instances run or disappear.
func WithClock(c clock.PassiveClock) Option {
	return func(p *Provider) { p.clock = c }
}

// WithProvisioningDelay keeps a new instance Provisioning (no IP, no port)
// until d after its Create, then Running. 0, the default, means Running at
// once.
func WithProvisioningDelay(d time.Duration) Option {
	return func(p *Provider) { p.provisioningDelay = d }
}

// WithDeletionDelay keeps a deleted instance visible to Get, ListByTag and
// Instances, State Stopped with Message "deleting", until d after its Delete.
// 0, the default, means gone at once.
func WithDeletionDelay(d time.Duration) Option {
	return func(p *Provider) { p.deletionDelay = d }
}

// WithAddress sets how a new instance gets its address, called once per
// instance at Create with the instance name. The default hands out
// 127.0.0.2, 127.0.0.3, ... 127.0.0.254, then 127.0.0.2 again, all on port
// 3128. f runs under the fake's lock: it must not call the Provider.
func WithAddress(f func(name string) (ip string, port int32)) Option {
	return func(p *Provider) { p.address = f }
}

// WithCallLatency makes every call wait d of real time (whatever WithClock
// says) before doing anything, returning early with the context's error when
// ctx ends first. For chaos tests only: unit tests should not wait.
func WithCallLatency(d time.Duration) Option {
	return func(p *Provider) { p.latency = d }
}

// Provider is the fake. The zero value is not usable: call New.
type Provider struct {
	// Set by options, read-only afterwards.
	clock             clock.PassiveClock
	provisioningDelay time.Duration
	deletionDelay     time.Duration
	address           func(name string) (string, int32)
	latency           time.Duration

	mu        sync.Mutex
	instances map[string]*record
	nextIP    int
	quota     int
	failNext  map[Op][]error
	failAfter map[Op][]error
	holdNext  []error
	held      map[string]provider.CreateRequest
	faultRate float64
	faultErrs []error
	rng       *rand.Rand
	calls     []Call
	creates   []provider.CreateRequest
}

var _ provider.Provider = (*Provider)(nil)

// record is one instance as the fake stores it; its visible state is
// computed from the clock by view.
type record struct {
	// inst holds ID, Tags, IP, Port, and the State and Message shown once the
	// instance is past provisioning (Running, or what Inject was given).
	inst    provider.Instance
	readyAt time.Time // zero: no provisioning phase
	stopped bool
	// deleting is set by Delete; the instance is gone from goneAt on.
	deleting bool
	goneAt   time.Time
}

// New returns an empty fake: no instances, no faults, no quota.
func New(opts ...Option) *Provider {
	p := &Provider{
		clock:     clock.RealClock{},
		instances: map[string]*record{},
		nextIP:    2,
		quota:     -1,
		failNext:  map[Op][]error{},
		failAfter: map[Op][]error{},
		held:      map[string]provider.CreateRequest{},
	}
	for _, o := range opts {
		o(p)
	}
	if p.address == nil {
		p.address = p.defaultAddress
	}
	return p
}

// defaultAddress runs under p.mu.
func (p *Provider) defaultAddress(string) (string, int32) {
	ip := fmt.Sprintf("127.0.0.%d", p.nextIP)
	p.nextIP++
	if p.nextIP > 254 {
		p.nextIP = 2
	}
	return ip, DefaultPort
}

// Stop turns the instance Stopped (Message "preempted"), as a cloud does when
// it preempts or terminates a VM; it stays Stopped until deleted. It reports
// whether the instance exists; a deleting instance is left as it is.
func (p *Provider) Stop(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.lookup(id, p.clock.Now())
	if r == nil {
		return false
	}
	if !r.deleting {
		r.stopped = true
	}
	return true
}

// Vanish removes the instance without a Delete call, as if someone deleted
// it out of band: Get returns provider.ErrNotFound from now on. It reports
// whether the instance existed.
func (p *Provider) Vanish(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lookup(id, p.clock.Now()) == nil {
		return false
	}
	delete(p.instances, id)
	return true
}

// Inject adds (or replaces) an instance created outside the controller, e.g.
// an orphan for garbage-collection tests. It is stored as given (an empty
// State means Running) with no provisioning phase, and it is not recorded
// as a call. Stop, Vanish and Delete work on it as on any instance. It
// panics on an empty ID.
func (p *Provider) Inject(inst provider.Instance) {
	if inst.ID == "" {
		panic("fake: Inject of an instance without ID")
	}
	inst = copyInstance(inst)
	if inst.State == "" {
		inst.State = provider.StateRunning
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.instances[inst.ID] = &record{inst: inst}
}

// Calls returns the calls received so far, in order.
func (p *Provider) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// CallCount returns how many calls of op were received.
func (p *Provider) CallCount(op Op) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		if c.Op == op {
			n++
		}
	}
	return n
}

// ResetCalls forgets the recorded calls and create requests.
func (p *Provider) ResetCalls() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = nil
	p.creates = nil
}

// CreateRequests returns (copies of) every request Create received, in
// order, including those that failed or found the name existing.
func (p *Provider) CreateRequests() []provider.CreateRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]provider.CreateRequest, len(p.creates))
	for i, r := range p.creates {
		out[i] = copyRequest(r)
	}
	return out
}

// Instances returns every instance the fake holds, sorted by ID, as Get
// would show them now. It records no call and injects no fault.
func (p *Provider) Instances() []provider.Instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.listLocked(func(provider.Instance) bool { return true })
}

// Instance returns the instance as Get would show it now, without recording a
// call or injecting a fault.
func (p *Provider) Instance(id string) (provider.Instance, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.lookup(id, p.clock.Now())
	if r == nil {
		return provider.Instance{}, false
	}
	return p.view(r, p.clock.Now()), true
}

// Create implements provider.Provider. The ID is req.Name. An empty name is
// a permanent error.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	if err := p.begin(ctx, OpCreate, req.Name, &req); err != nil {
		return provider.Instance{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if req.Name == "" {
		return provider.Instance{}, provider.Permanent(errors.New("fake: create: empty instance name"))
	}
	now := p.clock.Now()
	if r := p.lookup(req.Name, now); r != nil {
		if err := p.answer(OpCreate); err != nil {
			return provider.Instance{}, err
		}
		return p.view(r, now), nil
	}
	if p.quota >= 0 {
		if n := p.countLocked(now); n >= p.quota {
			return provider.Instance{}, provider.Quota(fmt.Errorf("fake: create %s: %d of %d instances in use", req.Name, n, p.quota))
		}
	}
	if err, rest := popError(p.holdNext); err != nil {
		p.holdNext = rest
		p.held[req.Name] = copyRequest(req)
		return provider.Instance{}, err
	}
	delete(p.held, req.Name)
	r := p.newRecord(req, now)
	p.instances[req.Name] = r
	if err := p.answer(OpCreate); err != nil {
		return provider.Instance{}, err
	}
	return p.view(r, now), nil
}

// newRecord makes the instance req asks for, at now. Runs under p.mu.
func (p *Provider) newRecord(req provider.CreateRequest, now time.Time) *record {
	ip, port := p.address(req.Name)
	r := &record{inst: provider.Instance{
		ID:       req.Name,
		State:    provider.StateRunning,
		IP:       ip,
		Port:     port,
		Tags:     copyTags(req.Tags),
		Message:  MessageRunning,
		SpecHash: req.SpecHash,
	}}
	if p.provisioningDelay > 0 {
		r.readyAt = now.Add(p.provisioningDelay)
	}
	return r
}

// Get implements provider.Provider: provider.ErrNotFound, wrapped with the
// id, when the instance does not exist.
func (p *Provider) Get(ctx context.Context, id string) (provider.Instance, error) {
	if err := p.begin(ctx, OpGet, id, nil); err != nil {
		return provider.Instance{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	r := p.lookup(id, now)
	if r == nil {
		return provider.Instance{}, fmt.Errorf("fake: get %s: %w", id, provider.ErrNotFound)
	}
	if err := p.answer(OpGet); err != nil {
		return provider.Instance{}, err
	}
	return p.view(r, now), nil
}

// Delete implements provider.Provider. With a deletion delay the instance
// stays visible, Stopped and "deleting", until the delay has passed; deleting
// it again does not restart the delay. A missing id is not an error.
func (p *Provider) Delete(ctx context.Context, id string) error {
	if err := p.begin(ctx, OpDelete, id, nil); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	r := p.lookup(id, now)
	switch {
	case r == nil, r.deleting:
	case p.deletionDelay <= 0:
		delete(p.instances, id)
	default:
		r.deleting = true
		r.goneAt = now.Add(p.deletionDelay)
	}
	return p.answer(OpDelete)
}

// ListByTag implements provider.Provider; the result is sorted by ID and
// includes instances still being deleted.
func (p *Provider) ListByTag(ctx context.Context, key, value string) ([]provider.Instance, error) {
	if err := p.begin(ctx, OpList, key+"="+value, nil); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.listLocked(func(inst provider.Instance) bool {
		v, ok := inst.Tags[key]
		return ok && v == value
	})
	if err := p.answer(OpList); err != nil {
		return nil, err
	}
	return out, nil
}

// begin records the call, waits the call latency, checks ctx and draws the
// faults; a non-nil error is what the call returns.
func (p *Provider) begin(ctx context.Context, op Op, id string, req *provider.CreateRequest) error {
	p.mu.Lock()
	p.calls = append(p.calls, Call{Op: op, ID: id})
	if req != nil {
		p.creates = append(p.creates, copyRequest(*req))
	}
	p.mu.Unlock()

	if p.latency > 0 {
		t := time.NewTimer(p.latency)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fake: %s %s: %w", op, id, err)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if err, rest := popError(p.failNext[op]); err != nil {
		p.failNext[op] = rest
		return err
	}
	if p.faultRate > 0 && p.rng.Float64() < p.faultRate {
		class := p.faultErrs[p.rng.IntN(len(p.faultErrs))]
		return provider.WithClass(class, fmt.Errorf("fake: %s %s: injected random %s fault", op, id, provider.ClassName(class)))
	}
	return nil
}

// lookup returns the record for id, or nil when there is none or its
// deletion delay has passed (then it is removed). Runs under p.mu.
func (p *Provider) lookup(id string, now time.Time) *record {
	r, ok := p.instances[id]
	if !ok {
		return nil
	}
	if r.deleting && !now.Before(r.goneAt) {
		delete(p.instances, id)
		return nil
	}
	return r
}

// countLocked counts the instances that exist at now. Runs under p.mu.
func (p *Provider) countLocked(now time.Time) int {
	n := 0
	for id := range p.instances {
		if p.lookup(id, now) != nil {
			n++
		}
	}
	return n
}

// listLocked returns the instances, as seen now, that keep accepts, sorted
// by ID. Runs under p.mu.
func (p *Provider) listLocked(keep func(provider.Instance) bool) []provider.Instance {
	now := p.clock.Now()
	var out []provider.Instance
	for id := range p.instances {
		r := p.lookup(id, now)
		if r == nil {
			continue
		}
		if inst := p.view(r, now); keep(inst) {
			out = append(out, inst)
		}
	}
	slices.SortFunc(out, func(a, b provider.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// view is the instance as callers see it at now: a copy, with IP and Port
// only once Running. Runs under p.mu.
func (p *Provider) view(r *record, now time.Time) provider.Instance {
	inst := copyInstance(r.inst)
	switch {
	case r.deleting:
		inst.State, inst.Message, inst.IP, inst.Port = provider.StateStopped, MessageDeleting, "", 0
	case r.stopped:
		inst.State, inst.Message, inst.IP, inst.Port = provider.StateStopped, MessagePreempted, "", 0
	case !r.readyAt.IsZero() && now.Before(r.readyAt):
		inst.State, inst.Message, inst.IP, inst.Port = provider.StateProvisioning, MessageProvisioning, "", 0
	}
	return inst
}

func copyInstance(in provider.Instance) provider.Instance {
	in.Tags = copyTags(in.Tags)
	return in
}

func copyTags(in map[string]string) map[string]string { return maps.Clone(in) }

func copyRequest(in provider.CreateRequest) provider.CreateRequest {
	in.Tags = copyTags(in.Tags)
	in.CloudInit = slices.Clone(in.CloudInit)
	if in.Proxy != nil {
		in.Proxy = in.Proxy.DeepCopy()
	}
	return in
}
