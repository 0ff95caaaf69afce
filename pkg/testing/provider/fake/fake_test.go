package fake

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testclock "k8s.io/utils/clock/testing"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newFake(opts ...Option) (*Provider, *testclock.FakeClock) {
	clk := testclock.NewFakeClock(epoch)
	return New(append([]Option{WithClock(clk)}, opts...)...), clk
}

func req(name string, tags map[string]string) provider.CreateRequest {
	return provider.CreateRequest{Name: name, Tags: tags, SpecHash: "hash-" + name}
}

func running(id, ip string, tags map[string]string) provider.Instance {
	// SpecHash as req made it: an instance reports the spec it was built from.
	return provider.Instance{ID: id, State: provider.StateRunning, IP: ip, Port: DefaultPort, Tags: tags, Message: MessageRunning, SpecHash: "hash-" + id}
}

func mustCreate(t *testing.T, p *Provider, r provider.CreateRequest) provider.Instance {
	t.Helper()
	inst, err := p.Create(context.Background(), r)
	if err != nil {
		t.Fatalf("Create(%s): %v", r.Name, err)
	}
	return inst
}

func TestCreate(t *testing.T) {
	tags := map[string]string{"k": "v"}
	tests := map[string]struct {
		requests []provider.CreateRequest
		want     []provider.Instance // what each Create returned
		wantAll  []provider.Instance
	}{
		"one": {
			requests: []provider.CreateRequest{req("px-a", tags)},
			want:     []provider.Instance{running("px-a", "127.0.0.2", tags)},
			wantAll:  []provider.Instance{running("px-a", "127.0.0.2", tags)},
		},
		"same name twice returns the first, without a new address": {
			requests: []provider.CreateRequest{req("px-a", tags), req("px-a", map[string]string{"other": "x"})},
			want:     []provider.Instance{running("px-a", "127.0.0.2", tags), running("px-a", "127.0.0.2", tags)},
			wantAll:  []provider.Instance{running("px-a", "127.0.0.2", tags)},
		},
		"two names, sorted by ID": {
			requests: []provider.CreateRequest{req("px-b", tags), req("px-a", nil)},
			want:     []provider.Instance{running("px-b", "127.0.0.2", tags), running("px-a", "127.0.0.3", nil)},
			wantAll:  []provider.Instance{running("px-a", "127.0.0.3", nil), running("px-b", "127.0.0.2", tags)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, _ := newFake()
			var got []provider.Instance
			for _, r := range tc.requests {
				got = append(got, mustCreate(t, p, r))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Create results (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantAll, p.Instances()); diff != "" {
				t.Errorf("Instances (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.requests, p.CreateRequests()); diff != "" {
				t.Errorf("CreateRequests (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCreateEmptyNameIsPermanent(t *testing.T) {
	p, _ := newFake()
	_, err := p.Create(context.Background(), req("", nil))
	if !errors.Is(err, provider.ErrPermanent) {
		t.Fatalf("Create with empty name: err = %v, want a permanent error", err)
	}
	if got := p.Instances(); len(got) != 0 {
		t.Errorf("instances after a failed create: %v", got)
	}
}

func TestCreateRequestsAreCopies(t *testing.T) {
	p, _ := newFake()
	proxy := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u-1"}}
	r := provider.CreateRequest{
		Name:      "px-a",
		Proxy:     proxy,
		Tags:      map[string]string{"k": "v"},
		CloudInit: []byte("#cloud-config\n"),
		SpecHash:  "h1",
	}
	mustCreate(t, p, r)
	want := provider.CreateRequest{
		Name:      "px-a",
		Proxy:     proxy.DeepCopy(),
		Tags:      map[string]string{"k": "v"},
		CloudInit: []byte("#cloud-config\n"),
		SpecHash:  "h1",
	}

	// The caller reuses its request and its Proxy after Create.
	r.Tags["k"] = "changed"
	r.CloudInit[0] = 'X'
	proxy.Name = "changed"

	if diff := cmp.Diff([]provider.CreateRequest{want}, p.CreateRequests()); diff != "" {
		t.Errorf("CreateRequests (-want +got):\n%s", diff)
	}
	wantInst := running("px-a", "127.0.0.2", map[string]string{"k": "v"})
	wantInst.SpecHash = "h1"
	if diff := cmp.Diff(wantInst, mustGet(t, p, "px-a")); diff != "" {
		t.Errorf("instance (-want +got):\n%s", diff)
	}

	// And mutates what the fake returned.
	p.CreateRequests()[0].Tags["k"] = "changed"
	p.CreateRequests()[0].CloudInit[0] = 'X'
	mustGet(t, p, "px-a").Tags["k"] = "changed"
	p.Instances()[0].Tags["k"] = "changed"
	inst, _ := p.Instance("px-a")
	inst.Tags["k"] = "changed"
	list, err := p.ListByTag(context.Background(), "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	list[0].Tags["k"] = "changed"

	if diff := cmp.Diff([]provider.CreateRequest{want}, p.CreateRequests()); diff != "" {
		t.Errorf("CreateRequests after mutating results (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantInst, mustGet(t, p, "px-a")); diff != "" {
		t.Errorf("instance after mutating results (-want +got):\n%s", diff)
	}
}

func mustGet(t *testing.T, p *Provider, id string) provider.Instance {
	t.Helper()
	inst, err := p.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return inst
}

func TestProvisioningDelay(t *testing.T) {
	tests := map[string]struct {
		delay time.Duration
		step  time.Duration
		want  provider.Instance
	}{
		"no delay: running at once": {
			delay: 0, step: 0,
			want: running("px-a", "127.0.0.2", nil),
		},
		"just created": {
			delay: 30 * time.Second, step: 0,
			want: provider.Instance{ID: "px-a", State: provider.StateProvisioning, Message: MessageProvisioning, SpecHash: "hash-px-a"},
		},
		"just before the delay": {
			delay: 30 * time.Second, step: 30*time.Second - time.Nanosecond,
			want: provider.Instance{ID: "px-a", State: provider.StateProvisioning, Message: MessageProvisioning, SpecHash: "hash-px-a"},
		},
		"at the delay": {
			delay: 30 * time.Second, step: 30 * time.Second,
			want: running("px-a", "127.0.0.2", nil),
		},
		"long after": {
			delay: 30 * time.Second, step: time.Hour,
			want: running("px-a", "127.0.0.2", nil),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, clk := newFake(WithProvisioningDelay(tc.delay))
			created := mustCreate(t, p, req("px-a", nil))
			if tc.delay > 0 && created.State != provider.StateProvisioning {
				t.Errorf("Create returned state %s, want %s", created.State, provider.StateProvisioning)
			}
			clk.Step(tc.step)
			if diff := cmp.Diff(tc.want, mustGet(t, p, "px-a")); diff != "" {
				t.Errorf("Get (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeletionDelay(t *testing.T) {
	deleting := provider.Instance{ID: "px-a", State: provider.StateStopped, Message: MessageDeleting, SpecHash: "hash-px-a"}
	tests := map[string]struct {
		delay time.Duration
		// steps[i] is how far the clock moves before the i-th Delete; the
		// last element is how far it moves before the final Get.
		steps []time.Duration
		want  *provider.Instance // nil: not found
	}{
		"no delay: gone at once": {
			delay: 0, steps: []time.Duration{0, 0},
		},
		"just deleted": {
			delay: time.Minute, steps: []time.Duration{0, 0},
			want: &deleting,
		},
		"just before the delay": {
			delay: time.Minute, steps: []time.Duration{0, time.Minute - time.Nanosecond},
			want: &deleting,
		},
		"at the delay": {
			delay: time.Minute, steps: []time.Duration{0, time.Minute},
		},
		"a second delete does not restart the delay": {
			delay: time.Minute, steps: []time.Duration{0, 40 * time.Second, 20 * time.Second},
		},
		"a second delete while deleting leaves it deleting": {
			delay: time.Minute, steps: []time.Duration{0, 40 * time.Second, 19 * time.Second},
			want: &deleting,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			p, clk := newFake(WithDeletionDelay(tc.delay))
			mustCreate(t, p, req("px-a", map[string]string{"k": "v"}))
			for _, d := range tc.steps[:len(tc.steps)-1] {
				clk.Step(d)
				if err := p.Delete(ctx, "px-a"); err != nil {
					t.Fatalf("Delete: %v", err)
				}
			}
			clk.Step(tc.steps[len(tc.steps)-1])

			got, err := p.Get(ctx, "px-a")
			list, lerr := p.ListByTag(ctx, "k", "v")
			if lerr != nil {
				t.Fatal(lerr)
			}
			if tc.want == nil {
				if !errors.Is(err, provider.ErrNotFound) {
					t.Errorf("Get: (%v, %v), want ErrNotFound", got, err)
				}
				if len(list) != 0 || len(p.Instances()) != 0 {
					t.Errorf("a deleted instance is still listed: %v / %v", list, p.Instances())
				}
				return
			}
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			want := *tc.want
			want.Tags = map[string]string{"k": "v"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Get (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]provider.Instance{want}, list); diff != "" {
				t.Errorf("ListByTag (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGetAndDeleteMissing(t *testing.T) {
	p, _ := newFake()
	ctx := context.Background()
	_, err := p.Get(ctx, "px-missing")
	if !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get of a missing id: err = %v, want ErrNotFound", err)
	}
	if err != nil && !strings.Contains(err.Error(), "px-missing") {
		t.Errorf("Get error %q does not name the id", err)
	}
	if err := p.Delete(ctx, "px-missing"); err != nil {
		t.Errorf("Delete of a missing id: %v, want nil", err)
	}
	if _, ok := p.Instance("px-missing"); ok {
		t.Error("Instance of a missing id reports found")
	}
}

// do runs op on p against "px-a" (ListByTag: k=v).
func do(p *Provider, op Op) error {
	ctx := context.Background()
	switch op {
	case OpCreate:
		_, err := p.Create(ctx, req("px-a", map[string]string{"k": "v"}))
		return err
	case OpGet:
		_, err := p.Get(ctx, "px-a")
		return err
	case OpDelete:
		return p.Delete(ctx, "px-a")
	case OpList:
		_, err := p.ListByTag(ctx, "k", "v")
		return err
	}
	panic("unknown op " + op)
}

func TestFailNext(t *testing.T) {
	errQ := provider.Quota(errors.New("q"))
	errP := provider.Permanent(errors.New("p"))
	errT := provider.Transient(errors.New("t"))
	type program struct {
		op    Op
		err   error
		times int
	}
	tests := map[string]struct {
		programs []program
		calls    []Op
		want     []error // what each call returns; nil: success
	}{
		"nothing programmed": {
			calls: []Op{OpCreate, OpGet, OpList, OpDelete},
			want:  []error{nil, nil, nil, nil},
		},
		"create fails twice then succeeds": {
			programs: []program{{OpCreate, errQ, 2}},
			calls:    []Op{OpCreate, OpCreate, OpCreate, OpGet},
			want:     []error{errQ, errQ, nil, nil},
		},
		"a failed create creates nothing": {
			programs: []program{{OpCreate, errT, 1}},
			calls:    []Op{OpCreate, OpGet},
			want:     []error{errT, provider.ErrNotFound},
		},
		"FIFO per op": {
			programs: []program{{OpGet, errT, 1}, {OpGet, errP, 2}, {OpGet, errQ, 1}},
			calls:    []Op{OpCreate, OpGet, OpGet, OpGet, OpGet, OpGet},
			want:     []error{nil, errT, errP, errP, errQ, nil},
		},
		"queues are per op": {
			programs: []program{{OpDelete, errP, 1}, {OpList, errT, 1}, {OpGet, errQ, 1}},
			calls:    []Op{OpCreate, OpList, OpDelete, OpList, OpGet, OpDelete, OpGet},
			want:     []error{nil, errT, errP, nil, errQ, nil, provider.ErrNotFound},
		},
		"a failed delete deletes nothing": {
			programs: []program{{OpDelete, errT, 1}},
			calls:    []Op{OpCreate, OpDelete, OpGet, OpDelete, OpGet},
			want:     []error{nil, errT, nil, nil, provider.ErrNotFound},
		},
		"zero times programs nothing": {
			programs: []program{{OpGet, errT, 0}},
			calls:    []Op{OpCreate, OpGet},
			want:     []error{nil, nil},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, _ := newFake()
			for _, pr := range tc.programs {
				p.FailNext(pr.op, pr.err, pr.times)
			}
			var got []error
			for _, op := range tc.calls {
				got = append(got, do(p, op))
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateErrors()); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			// Failed calls are recorded too.
			if got, want := len(p.Calls()), len(tc.calls); got != want {
				t.Errorf("recorded %d calls, want %d", got, want)
			}
		})
	}
}

// TestFailNextAfter: the call takes effect, then fails; calls that fail
// anyway leave the queued error for the next one.
func TestFailNextAfter(t *testing.T) {
	errQ := provider.Quota(errors.New("q"))
	errP := provider.Permanent(errors.New("p"))
	errT := provider.Transient(errors.New("t"))
	type program struct {
		op     Op
		err    error
		times  int
		before bool // FailNext rather than FailNextAfter
	}
	tests := map[string]struct {
		programs []program
		calls    []Op
		want     []error // what each call returns; nil: success
	}{
		"a create that fails after creates": {
			programs: []program{{op: OpCreate, err: errT, times: 1}},
			calls:    []Op{OpCreate, OpGet, OpCreate},
			want:     []error{errT, nil, nil},
		},
		"creating an existing name uses it too, FIFO": {
			programs: []program{{op: OpCreate, err: errT, times: 1}, {op: OpCreate, err: errP, times: 2}},
			calls:    []Op{OpCreate, OpCreate, OpCreate, OpCreate, OpGet},
			want:     []error{errT, errP, errP, nil, nil},
		},
		"a delete that fails after deletes": {
			programs: []program{{op: OpDelete, err: errQ, times: 1}},
			calls:    []Op{OpCreate, OpDelete, OpGet, OpDelete},
			want:     []error{nil, errQ, provider.ErrNotFound, nil},
		},
		"a call failed before does not use it": {
			programs: []program{{op: OpCreate, err: errQ, times: 1, before: true}, {op: OpCreate, err: errP, times: 1}},
			calls:    []Op{OpCreate, OpGet, OpCreate, OpGet},
			want:     []error{errQ, provider.ErrNotFound, errP, nil},
		},
		"a get of a missing instance does not use it": {
			programs: []program{{op: OpGet, err: errT, times: 1}},
			calls:    []Op{OpGet, OpCreate, OpGet, OpGet},
			want:     []error{provider.ErrNotFound, nil, errT, nil},
		},
		"list": {
			programs: []program{{op: OpList, err: errT, times: 1}},
			calls:    []Op{OpCreate, OpList, OpList},
			want:     []error{nil, errT, nil},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, _ := newFake()
			for _, pr := range tc.programs {
				if pr.before {
					p.FailNext(pr.op, pr.err, pr.times)
				} else {
					p.FailNextAfter(pr.op, pr.err, pr.times)
				}
			}
			var got []error
			for _, op := range tc.calls {
				got = append(got, do(p, op))
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateErrors()); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFailNextAfterQuotaRefusalDoesNotUseIt(t *testing.T) {
	p, _ := newFake()
	p.SetQuota(0)
	errT := provider.Transient(errors.New("t"))
	p.FailNextAfter(OpCreate, errT, 1)
	if err := do(p, OpCreate); !errors.Is(err, provider.ErrQuotaExceeded) {
		t.Fatalf("create under quota 0: %v, want a quota error", err)
	}
	p.SetQuota(-1)
	if err := do(p, OpCreate); !errors.Is(err, errT) {
		t.Errorf("create after the quota lifted: %v, want the queued error", err)
	}
	if _, ok := p.Instance("px-a"); !ok {
		t.Error("the create that failed after did not create")
	}
}

func TestResetFaults(t *testing.T) {
	p, _ := newFake()
	p.SetRandomFaults(1, nil, 1)
	p.FailNext(OpCreate, provider.Transient(errors.New("before")), 2)
	p.FailNextAfter(OpCreate, provider.Transient(errors.New("after")), 2)
	p.FailNextAfter(OpDelete, provider.Transient(errors.New("after")), 1)
	p.HoldNextCreates(provider.Transient(errors.New("held")), 1)
	p.ResetFaults()
	for _, op := range []Op{OpCreate, OpGet, OpList, OpDelete, OpCreate, OpDelete} {
		if err := do(p, op); err != nil {
			t.Errorf("%s after ResetFaults: %v", op, err)
		}
	}
}

// TestHoldNextCreates: a held Create fails, and its instance appears only at
// ReleaseHeld, unless the name was created meanwhile.
func TestHoldNextCreates(t *testing.T) {
	errHeld := provider.Transient(errors.New("timeout"))
	errBefore := provider.Quota(errors.New("q"))
	const release Op = "release"
	tests := map[string]struct {
		failBefore bool // a FailNext error for Create queued too
		calls      []Op
		want       []string
	}{
		"the instance appears at the release": {
			calls: []Op{OpCreate, OpGet, OpList, release, OpGet, OpList, release},
			want:  []string{"held", "not found", "ok", "released 1", "ok", "ok", "released 0"},
		},
		"a create meanwhile makes it and drops the held one": {
			calls: []Op{OpCreate, OpCreate, OpGet, release},
			want:  []string{"held", "ok", "ok", "released 0"},
		},
		"a delete meanwhile finds nothing": {
			calls: []Op{OpCreate, OpDelete, release, OpGet},
			want:  []string{"held", "ok", "released 1", "ok"},
		},
		"a create failed before does not use it": {
			failBefore: true,
			calls:      []Op{OpCreate, OpCreate, OpGet, release, OpGet},
			want:       []string{"failed before", "held", "not found", "released 1", "ok"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, _ := newFake()
			if tc.failBefore {
				p.FailNext(OpCreate, errBefore, 1)
			}
			p.HoldNextCreates(errHeld, 1)
			var got []string
			for _, op := range tc.calls {
				if op == release {
					got = append(got, fmt.Sprintf("released %d", p.ReleaseHeld()))
					continue
				}
				switch err := do(p, op); {
				case err == nil:
					got = append(got, "ok")
				case errors.Is(err, provider.ErrNotFound):
					got = append(got, "not found")
				case err == errHeld:
					got = append(got, "held")
				case err == errBefore:
					got = append(got, "failed before")
				default:
					got = append(got, err.Error())
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReleasedInstanceIsWhatCreateWouldHaveMade(t *testing.T) {
	p, clk := newFake(WithProvisioningDelay(time.Second))
	p.HoldNextCreates(provider.Transient(errors.New("timeout")), 1)
	tags := map[string]string{"k": "v"}
	if _, err := p.Create(context.Background(), req("px-a", tags)); err == nil {
		t.Fatal("the held create succeeded")
	}
	clk.Step(time.Minute)
	if n := p.ReleaseHeld(); n != 1 {
		t.Fatalf("released %d, want 1", n)
	}
	if got := mustGet(t, p, "px-a"); got.State != provider.StateProvisioning {
		t.Errorf("released instance is %s, want Provisioning from the release on", got.State)
	}
	clk.Step(time.Second)
	if diff := cmp.Diff(running("px-a", "127.0.0.2", tags), mustGet(t, p, "px-a")); diff != "" {
		t.Errorf("released instance (-want +got):\n%s", diff)
	}
}

// outcomes makes n Get calls on a fresh fake with random faults and returns
// the class name of each error, "" for success ("px-a" exists).
func outcomes(t *testing.T, rate float64, classes []error, seed int64, n int) []string {
	t.Helper()
	p, _ := newFake()
	p.Inject(provider.Instance{ID: "px-a"})
	p.SetRandomFaults(rate, classes, seed)
	out := make([]string, n)
	for i := range out {
		if _, err := p.Get(context.Background(), "px-a"); err != nil {
			if errors.Is(err, provider.ErrNotFound) {
				t.Fatalf("a random fault changed state: %v", err)
			}
			out[i] = provider.ClassName(err)
			// The message names the class, so a status condition shows it.
			if want := "injected random " + out[i] + " fault"; !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not say %q", err, want)
			}
		}
	}
	return out
}

func TestRandomFaults(t *testing.T) {
	all := []error{provider.ErrQuotaExceeded, provider.ErrPermanent, provider.ErrTransient}
	tests := map[string]struct {
		rate    float64
		classes []error
		seed    int64
	}{
		"off":                    {rate: 0, classes: all, seed: 1},
		"rare":                   {rate: 0.05, classes: all, seed: 2},
		"third, all classes":     {rate: 0.3, classes: all, seed: 3},
		"half, default classes":  {rate: 0.5, classes: nil, seed: 4},
		"half, transient only":   {rate: 0.5, classes: []error{provider.ErrTransient}, seed: 5},
		"most, quota+permanent":  {rate: 0.9, classes: []error{provider.ErrQuotaExceeded, provider.ErrPermanent}, seed: 6},
		"always":                 {rate: 1, classes: all, seed: 7},
		"always, negative seed":  {rate: 1, classes: []error{provider.ErrPermanent}, seed: -8},
		"third, another seed":    {rate: 0.3, classes: all, seed: 1 << 40},
		"half, permanent only":   {rate: 0.5, classes: []error{provider.ErrPermanent}, seed: 9},
		"tenth, transient+quota": {rate: 0.1, classes: []error{provider.ErrTransient, provider.ErrQuotaExceeded}, seed: 10},
	}
	const n = 1000
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := outcomes(t, tc.rate, tc.classes, tc.seed, n)

			if diff := cmp.Diff(got, outcomes(t, tc.rate, tc.classes, tc.seed, n)); diff != "" {
				t.Errorf("same seed, different outcomes (-first +second):\n%s", diff)
			}

			classes := tc.classes
			if len(classes) == 0 {
				classes = all
			}
			allowed := map[string]bool{}
			for _, c := range classes {
				allowed[provider.ClassName(c)] = true
			}
			perClass := map[string]int{}
			failed := 0
			for _, o := range got {
				if o == "" {
					continue
				}
				failed++
				perClass[o]++
				if !allowed[o] {
					t.Fatalf("a %s fault, want only %v", o, classes)
				}
			}
			if want := tc.rate * n; float64(failed) < want-0.05*n || float64(failed) > want+0.05*n {
				t.Errorf("%d of %d calls failed, want %v ± %v", failed, n, want, 0.05*n)
			}
			// Classes are uniform: each gets its share of the failures ± 5% of n.
			for _, c := range classes {
				share := float64(failed) / float64(len(classes))
				if got := float64(perClass[provider.ClassName(c)]); got < share-0.05*n || got > share+0.05*n {
					t.Errorf("%v: %v faults, want %v ± %v", provider.ClassName(c), got, share, 0.05*n)
				}
			}
		})
	}
}

func TestRandomFaultsSeedMatters(t *testing.T) {
	a := outcomes(t, 0.5, nil, 1, 200)
	b := outcomes(t, 0.5, nil, 2, 200)
	if cmp.Equal(a, b) {
		t.Error("seeds 1 and 2 gave the same 200 outcomes")
	}
}

func TestRandomFaultsAfterFailNext(t *testing.T) {
	// A programmed error wins and draws nothing, so the random sequence
	// after it is the same as without it.
	errP := provider.Permanent(errors.New("programmed"))
	p, _ := newFake()
	p.Inject(provider.Instance{ID: "px-a"})
	p.SetRandomFaults(0.5, nil, 42)
	p.FailNext(OpGet, errP, 1)
	if err := do(p, OpGet); err != errP {
		t.Fatalf("first Get: %v, want the programmed error", err)
	}
	var got []string
	for range 100 {
		o := ""
		if err := do(p, OpGet); err != nil {
			o = provider.ClassName(err)
		}
		got = append(got, o)
	}
	if diff := cmp.Diff(outcomes(t, 0.5, nil, 42, 100), got); diff != "" {
		t.Errorf("random outcomes after a programmed error (-want +got):\n%s", diff)
	}
}

func TestRandomFaultsPanics(t *testing.T) {
	tests := map[string]struct {
		rate    float64
		classes []error
	}{
		"negative rate":    {rate: -0.1},
		"rate above one":   {rate: 1.1},
		"unknown class":    {rate: 0.5, classes: []error{errors.New("boom")}},
		"wrapped class":    {rate: 0.5, classes: []error{provider.Quota(errors.New("q"))}},
		"not found":        {rate: 0.5, classes: []error{provider.ErrNotFound}},
		"one bad of three": {rate: 0.5, classes: []error{provider.ErrTransient, nil, provider.ErrPermanent}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			New().SetRandomFaults(tc.rate, tc.classes, 1)
		})
	}
}

func TestQuota(t *testing.T) {
	tests := map[string]struct {
		quota         int
		deletionDelay time.Duration
		// setup runs before the Create of "px-new" under test.
		setup   func(t *testing.T, p *Provider, clk *testclock.FakeClock)
		wantErr error
	}{
		"unlimited": {
			quota: -1,
			setup: func(t *testing.T, p *Provider, _ *testclock.FakeClock) {
				for i := range 300 {
					mustCreate(t, p, req(fmt.Sprintf("px-%d", i), nil))
				}
			},
		},
		"zero": {
			quota:   0,
			setup:   func(*testing.T, *Provider, *testclock.FakeClock) {},
			wantErr: provider.ErrQuotaExceeded,
		},
		"below": {
			quota: 2,
			setup: func(t *testing.T, p *Provider, _ *testclock.FakeClock) {
				mustCreate(t, p, req("px-1", nil))
			},
		},
		"at": {
			quota: 2,
			setup: func(t *testing.T, p *Provider, _ *testclock.FakeClock) {
				mustCreate(t, p, req("px-1", nil))
				mustCreate(t, p, req("px-2", nil))
			},
			wantErr: provider.ErrQuotaExceeded,
		},
		"injected and stopped instances count": {
			quota: 2,
			setup: func(t *testing.T, p *Provider, _ *testclock.FakeClock) {
				p.Inject(provider.Instance{ID: "px-orphan"})
				mustCreate(t, p, req("px-1", nil))
				p.Stop("px-1")
			},
			wantErr: provider.ErrQuotaExceeded,
		},
		"a deleted instance frees its slot": {
			quota: 1,
			setup: func(t *testing.T, p *Provider, _ *testclock.FakeClock) {
				mustCreate(t, p, req("px-1", nil))
				if err := p.Delete(context.Background(), "px-1"); err != nil {
					t.Fatal(err)
				}
			},
		},
		"a deleting instance counts until gone": {
			quota: 1, deletionDelay: time.Minute,
			setup: func(t *testing.T, p *Provider, clk *testclock.FakeClock) {
				mustCreate(t, p, req("px-1", nil))
				if err := p.Delete(context.Background(), "px-1"); err != nil {
					t.Fatal(err)
				}
				clk.Step(59 * time.Second)
			},
			wantErr: provider.ErrQuotaExceeded,
		},
		"a deleted instance frees its slot after the deletion delay": {
			quota: 1, deletionDelay: time.Minute,
			setup: func(t *testing.T, p *Provider, clk *testclock.FakeClock) {
				mustCreate(t, p, req("px-1", nil))
				if err := p.Delete(context.Background(), "px-1"); err != nil {
					t.Fatal(err)
				}
				clk.Step(time.Minute)
			},
		},
		"a vanished instance frees its slot": {
			quota: 1,
			setup: func(t *testing.T, p *Provider, _ *testclock.FakeClock) {
				mustCreate(t, p, req("px-1", nil))
				p.Vanish("px-1")
			},
		},
		"an existing name is returned at quota": {
			quota: 1,
			setup: func(t *testing.T, p *Provider, _ *testclock.FakeClock) {
				mustCreate(t, p, req("px-new", nil))
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, clk := newFake(WithDeletionDelay(tc.deletionDelay))
			p.SetQuota(tc.quota)
			tc.setup(t, p, clk)
			before := p.Instances()
			inst, err := p.Create(context.Background(), req("px-new", nil))
			if diff := cmp.Diff(tc.wantErr, err, cmpopts.EquateErrors()); diff != "" {
				t.Fatalf("Create error (-want +got):\n%s", diff)
			}
			if err != nil {
				if diff := cmp.Diff(before, p.Instances()); diff != "" {
					t.Errorf("a create over quota changed the instances (-before +after):\n%s", diff)
				}
				return
			}
			if inst.ID != "px-new" {
				t.Errorf("Create returned %q", inst.ID)
			}
		})
	}
}

func TestQuotaLifted(t *testing.T) {
	p, _ := newFake()
	p.SetQuota(0)
	if err := do(p, OpCreate); !errors.Is(err, provider.ErrQuotaExceeded) {
		t.Fatalf("Create at quota 0: %v", err)
	}
	p.SetQuota(-1)
	if err := do(p, OpCreate); err != nil {
		t.Fatalf("Create after SetQuota(-1): %v", err)
	}
}

func TestStopAndVanish(t *testing.T) {
	tags := map[string]string{"k": "v"}
	stopped := provider.Instance{ID: "px-a", State: provider.StateStopped, Tags: tags, Message: MessagePreempted, SpecHash: "hash-px-a"}
	deleting := provider.Instance{ID: "px-a", State: provider.StateStopped, Tags: tags, Message: MessageDeleting, SpecHash: "hash-px-a"}
	tests := map[string]struct {
		provisioningDelay time.Duration
		deletionDelay     time.Duration
		create            bool
		deleteFirst       bool
		act               func(p *Provider) bool
		wantOK            bool
		want              *provider.Instance // nil: not found
	}{
		"stop a running instance": {
			create: true, act: func(p *Provider) bool { return p.Stop("px-a") },
			wantOK: true, want: &stopped,
		},
		"stop a provisioning instance": {
			provisioningDelay: time.Hour,
			create:            true, act: func(p *Provider) bool { return p.Stop("px-a") },
			wantOK: true, want: &stopped,
		},
		"stop a deleting instance leaves it deleting": {
			deletionDelay: time.Hour, create: true, deleteFirst: true,
			act:    func(p *Provider) bool { return p.Stop("px-a") },
			wantOK: true, want: &deleting,
		},
		"stop a missing instance": {
			act: func(p *Provider) bool { return p.Stop("px-a") },
		},
		"vanish": {
			create: true, act: func(p *Provider) bool { return p.Vanish("px-a") },
			wantOK: true,
		},
		"vanish a deleting instance": {
			deletionDelay: time.Hour, create: true, deleteFirst: true,
			act:    func(p *Provider) bool { return p.Vanish("px-a") },
			wantOK: true,
		},
		"vanish a missing instance": {
			act: func(p *Provider) bool { return p.Vanish("px-a") },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			p, clk := newFake(WithProvisioningDelay(tc.provisioningDelay), WithDeletionDelay(tc.deletionDelay))
			if tc.create {
				mustCreate(t, p, req("px-a", tags))
			}
			if tc.deleteFirst {
				if err := p.Delete(ctx, "px-a"); err != nil {
					t.Fatal(err)
				}
			}
			p.ResetCalls()
			if got := tc.act(p); got != tc.wantOK {
				t.Errorf("returned %v, want %v", got, tc.wantOK)
			}
			if len(p.Calls()) != 0 {
				t.Errorf("Stop/Vanish recorded calls: %v", p.Calls())
			}
			// It stays that way: a stopped instance does not come back when
			// its provisioning delay passes.
			clk.Step(time.Minute)
			got, err := p.Get(ctx, "px-a")
			if tc.want == nil {
				if !errors.Is(err, provider.ErrNotFound) {
					t.Errorf("Get: (%v, %v), want ErrNotFound", got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if diff := cmp.Diff(*tc.want, got); diff != "" {
				t.Errorf("Get (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStoppedInstanceCanBeDeletedAndRecreated(t *testing.T) {
	p, _ := newFake()
	ctx := context.Background()
	mustCreate(t, p, req("px-a", nil))
	p.Stop("px-a")
	if got := mustCreate(t, p, req("px-a", nil)); got.State != provider.StateStopped {
		t.Errorf("Create of a stopped name returned %s, want the stopped instance", got.State)
	}
	if err := p.Delete(ctx, "px-a"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(running("px-a", "127.0.0.3", nil), mustCreate(t, p, req("px-a", nil))); diff != "" {
		t.Errorf("recreated instance (-want +got):\n%s", diff)
	}
}

func TestInjectAndListByTag(t *testing.T) {
	mine := map[string]string{crawlv1alpha1.TagManagedBy: crawlv1alpha1.ManagedByValue, crawlv1alpha1.TagProxyUID: "u-1"}
	orphan := map[string]string{crawlv1alpha1.TagManagedBy: crawlv1alpha1.ManagedByValue, crawlv1alpha1.TagProxyUID: "u-gone"}
	foreign := map[string]string{"team": "other"}

	p, _ := newFake(WithDeletionDelay(time.Hour))
	mustCreate(t, p, req("px-mine", mine))
	mustCreate(t, p, req("px-deleting", mine))
	if err := p.Delete(context.Background(), "px-deleting"); err != nil {
		t.Fatal(err)
	}
	p.Inject(provider.Instance{ID: "px-orphan", IP: "10.0.0.9", Port: 8080, Tags: orphan})
	p.Inject(provider.Instance{ID: "vm-foreign", State: provider.StateStopped, Message: "terminated", Tags: foreign})
	p.Inject(provider.Instance{ID: "px-provisioning", State: provider.StateProvisioning, Tags: orphan})
	p.Inject(provider.Instance{ID: "px-untagged"})

	wantMine := running("px-mine", "127.0.0.2", mine)
	wantDeleting := provider.Instance{ID: "px-deleting", State: provider.StateStopped, Tags: mine, Message: MessageDeleting, SpecHash: "hash-px-deleting"}
	wantOrphan := provider.Instance{ID: "px-orphan", State: provider.StateRunning, IP: "10.0.0.9", Port: 8080, Tags: orphan}
	wantProvisioning := provider.Instance{ID: "px-provisioning", State: provider.StateProvisioning, Tags: orphan}
	wantForeign := provider.Instance{ID: "vm-foreign", State: provider.StateStopped, Message: "terminated", Tags: foreign}

	tests := map[string]struct {
		key, value string
		want       []provider.Instance
	}{
		"managed-by, sorted, deleting included": {
			key: crawlv1alpha1.TagManagedBy, value: crawlv1alpha1.ManagedByValue,
			want: []provider.Instance{wantDeleting, wantMine, wantOrphan, wantProvisioning},
		},
		"one uid": {
			key: crawlv1alpha1.TagProxyUID, value: "u-1",
			want: []provider.Instance{wantDeleting, wantMine},
		},
		"orphan uid": {
			key: crawlv1alpha1.TagProxyUID, value: "u-gone",
			want: []provider.Instance{wantOrphan, wantProvisioning},
		},
		"foreign": {
			key: "team", value: "other",
			want: []provider.Instance{wantForeign},
		},
		"no such value": {
			key: crawlv1alpha1.TagProxyUID, value: "u-none",
		},
		"empty value does not match a missing key": {
			key: "team", value: "",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p.ResetCalls()
			got, err := p.ListByTag(context.Background(), tc.key, tc.value)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ListByTag (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]Call{{OpList, tc.key + "=" + tc.value}}, p.Calls()); diff != "" {
				t.Errorf("Calls (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInjectedInstanceLifecycle(t *testing.T) {
	ctx := context.Background()
	p, _ := newFake()
	p.Inject(provider.Instance{ID: "px-orphan", Tags: map[string]string{"k": "v"}})
	if got := mustCreate(t, p, req("px-orphan", nil)); got.State != provider.StateRunning || got.Tags["k"] != "v" {
		t.Errorf("Create of an injected name returned %+v, want the injected instance", got)
	}
	if err := p.Delete(ctx, "px-orphan"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, "px-orphan"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
}

func TestCalls(t *testing.T) {
	p, _ := newFake()
	ctx := context.Background()
	p.FailNext(OpDelete, provider.Transient(errors.New("t")), 1)
	mustCreate(t, p, req("px-a", nil))
	_, _ = p.Get(ctx, "px-a")
	_, _ = p.Get(ctx, "px-b")
	_ = p.Delete(ctx, "px-a")
	_ = p.Delete(ctx, "px-a")
	_, _ = p.ListByTag(ctx, "k", "v")
	_, _ = p.Create(ctx, req("px-a", nil))

	want := []Call{
		{OpCreate, "px-a"}, {OpGet, "px-a"}, {OpGet, "px-b"}, {OpDelete, "px-a"},
		{OpDelete, "px-a"}, {OpList, "k=v"}, {OpCreate, "px-a"},
	}
	if diff := cmp.Diff(want, p.Calls()); diff != "" {
		t.Errorf("Calls (-want +got):\n%s", diff)
	}
	wantCounts := map[Op]int{OpCreate: 2, OpGet: 2, OpDelete: 2, OpList: 1}
	gotCounts := map[Op]int{}
	for _, op := range []Op{OpCreate, OpGet, OpDelete, OpList} {
		gotCounts[op] = p.CallCount(op)
	}
	if diff := cmp.Diff(wantCounts, gotCounts); diff != "" {
		t.Errorf("CallCount (-want +got):\n%s", diff)
	}
	if got := len(p.CreateRequests()); got != 2 {
		t.Errorf("%d create requests, want 2", got)
	}

	p.ResetCalls()
	if len(p.Calls()) != 0 || p.CallCount(OpCreate) != 0 || len(p.CreateRequests()) != 0 {
		t.Errorf("after ResetCalls: calls %v, create requests %v", p.Calls(), p.CreateRequests())
	}
	// Resetting calls keeps the instances.
	if len(p.Instances()) != 1 {
		t.Errorf("ResetCalls changed the instances: %v", p.Instances())
	}
}

func TestAddress(t *testing.T) {
	t.Run("default counter wraps from 254 to 2", func(t *testing.T) {
		p, _ := newFake()
		var got []string
		for i := range 255 {
			inst := mustCreate(t, p, req(fmt.Sprintf("px-%03d", i), nil))
			if inst.Port != DefaultPort {
				t.Fatalf("port %d, want %d", inst.Port, DefaultPort)
			}
			got = append(got, inst.IP)
		}
		want := []string{"127.0.0.2", "127.0.0.3", "127.0.0.254", "127.0.0.2", "127.0.0.3"}
		if diff := cmp.Diff(want, []string{got[0], got[1], got[252], got[253], got[254]}); diff != "" {
			t.Errorf("addresses (-want +got):\n%s", diff)
		}
	})
	t.Run("custom", func(t *testing.T) {
		var names []string
		p, _ := newFake(WithAddress(func(name string) (string, int32) {
			names = append(names, name)
			return "192.0.2.7", 9999
		}))
		mustCreate(t, p, req("px-a", nil))
		mustCreate(t, p, req("px-a", nil))
		got := mustGet(t, p, "px-a")
		if got.IP != "192.0.2.7" || got.Port != 9999 {
			t.Errorf("address %s:%d, want 192.0.2.7:9999", got.IP, got.Port)
		}
		if diff := cmp.Diff([]string{"px-a"}, names); diff != "" {
			t.Errorf("address function called for (-want +got):\n%s", diff)
		}
	})
}

func TestContext(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), epoch)
	defer cancel2()
	tests := map[string]struct {
		latency time.Duration
		ctx     context.Context
		wantErr error
	}{
		"no latency":                   {ctx: context.Background()},
		"short latency":                {latency: time.Millisecond, ctx: context.Background()},
		"canceled, no latency":         {ctx: canceled, wantErr: context.Canceled},
		"canceled during long latency": {latency: time.Hour, ctx: canceled, wantErr: context.Canceled},
		"deadline during long latency": {latency: time.Hour, ctx: expired, wantErr: context.DeadlineExceeded},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, _ := newFake(WithCallLatency(tc.latency))
			p.Inject(provider.Instance{ID: "px-a"})
			_, createErr := p.Create(tc.ctx, req("px-b", nil))
			_, getErr := p.Get(tc.ctx, "px-a")
			deleteErr := p.Delete(tc.ctx, "px-a")
			_, listErr := p.ListByTag(tc.ctx, "k", "v")
			for op, err := range map[Op]error{OpCreate: createErr, OpGet: getErr, OpDelete: deleteErr, OpList: listErr} {
				if diff := cmp.Diff(tc.wantErr, err, cmpopts.EquateErrors()); diff != "" {
					t.Errorf("%s error (-want +got):\n%s", op, diff)
				}
			}
			if tc.wantErr != nil {
				// Nothing happened.
				if diff := cmp.Diff([]provider.Instance{{ID: "px-a", State: provider.StateRunning}}, p.Instances()); diff != "" {
					t.Errorf("instances after canceled calls (-want +got):\n%s", diff)
				}
			}
			if got := len(p.Calls()); got != 4 {
				t.Errorf("%d calls recorded, want 4", got)
			}
		})
	}
}

func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	p, clk := newFake(WithProvisioningDelay(time.Second), WithDeletionDelay(time.Second))
	p.SetRandomFaults(0.1, nil, 1)
	p.SetQuota(8)
	const goroutines, iterations = 8, 300
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range iterations {
				name := fmt.Sprintf("px-%d", (g+i)%10)
				tags := map[string]string{"k": "v", "g": fmt.Sprint(g)}
				if inst, err := p.Create(ctx, req(name, tags)); err == nil && inst.ID != name {
					t.Errorf("Create(%s) returned %s", name, inst.ID)
				}
				if inst, err := p.Get(ctx, name); err == nil {
					inst.Tags["k"] = "mutated"
				}
				_, _ = p.ListByTag(ctx, "k", "v")
				_ = p.Delete(ctx, name)
				switch i % 50 {
				case 0:
					p.Stop(name)
				case 10:
					p.Vanish(name)
				case 20:
					p.Inject(provider.Instance{ID: name + "-orphan", Tags: tags})
				case 30:
					p.FailNext(OpGet, provider.Transient(errors.New("t")), 1)
				case 40:
					clk.Step(100 * time.Millisecond)
				case 45:
					_ = p.Calls()
					_ = p.CallCount(OpGet)
					_ = p.CreateRequests()
				}
				_ = p.Instances()
			}
		})
	}
	wg.Wait()

	for _, op := range []Op{OpCreate, OpGet, OpDelete, OpList} {
		if got := p.CallCount(op); got != goroutines*iterations {
			t.Errorf("CallCount(%s) = %d, want %d", op, got, goroutines*iterations)
		}
	}
	if got := len(p.CreateRequests()); got != goroutines*iterations {
		t.Errorf("%d create requests, want %d", got, goroutines*iterations)
	}
	for _, inst := range p.Instances() {
		if inst.Tags["k"] != "v" {
			t.Errorf("%s: tags %v were mutated through a returned copy", inst.ID, inst.Tags)
		}
	}
}
