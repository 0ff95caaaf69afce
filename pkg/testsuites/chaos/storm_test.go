package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/testing/controllertest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/fake"
)

// The messages of the errors the test programs (the random faults have the
// fake's own): a call that took effect at the provider but whose answer was
// lost; a Create the provider acted on only later (fake.HoldNextCreates).
const (
	stormLost     = "storm: the provider's answer was lost"
	stormTimedOut = "storm: the provider timed out"
)

// stormClasses are the provider error classes, all of which the storm
// injects.
var stormClasses = []error{provider.ErrQuotaExceeded, provider.ErrPermanent, provider.ErrTransient}

// stormProvider is the fake provider as the storm sees it: it counts calls
// and errors by class, and records the spec hash of the Create that made
// each instance, so the test can tell an instance built from an older spec.
type stormProvider struct {
	*fake.Provider

	mu sync.Mutex
	// creating is the spec hash of the Create in flight, per instance name;
	// the fake calls address (under its lock) only when a Create makes a new
	// instance, which is when built takes it.
	creating map[string]string
	built    map[string]string
	nextAddr int
	calls    map[fake.Op]int
	errs     map[string]int // by class name; "not found" apart
}

func newStormProvider(opts ...fake.Option) *stormProvider {
	p := &stormProvider{creating: map[string]string{}, built: map[string]string{}, calls: map[fake.Op]int{}, errs: map[string]int{}}
	p.Provider = fake.New(append(opts, fake.WithAddress(p.address))...)
	return p
}

// address gives every new instance an address of its own (127.0.0.0/8 is
// big enough), so that a verdict about an instance never matches its
// successor, and records what the instance is built from.
func (p *stormProvider) address(name string) (string, int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.built[name] = p.creating[name]
	p.nextAddr++
	n := p.nextAddr
	return fmt.Sprintf("127.%d.%d.%d", byte(n>>16), byte(n>>8), byte(n)), fake.DefaultPort
}

func (p *stormProvider) count(op fake.Op, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[op]++
	switch {
	case err == nil:
	case errors.Is(err, provider.ErrNotFound):
		p.errs["not found"]++
	default:
		p.errs[provider.ClassName(err)]++
	}
}

func (p *stormProvider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	p.mu.Lock()
	p.creating[req.Name] = req.SpecHash
	p.mu.Unlock()
	inst, err := p.Provider.Create(ctx, req)
	p.count(fake.OpCreate, err)
	return inst, err
}

func (p *stormProvider) Get(ctx context.Context, id string) (provider.Instance, error) {
	inst, err := p.Provider.Get(ctx, id)
	p.count(fake.OpGet, err)
	return inst, err
}

func (p *stormProvider) Delete(ctx context.Context, id string) error {
	err := p.Provider.Delete(ctx, id)
	p.count(fake.OpDelete, err)
	return err
}

func (p *stormProvider) ListByTag(ctx context.Context, key, value string) ([]provider.Instance, error) {
	out, err := p.Provider.ListByTag(ctx, key, value)
	p.count(fake.OpList, err)
	return out, err
}

// builtFrom is the spec hash of the Create that made the instance id.
func (p *stormProvider) builtFrom(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.built[id]
}

func (p *stormProvider) counts() (map[fake.Op]int, map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.calls), maps.Clone(p.errs)
}

// stormBlows counts what the storm did behind the controller's back.
type stormBlows struct {
	vanished, stopped int
	lost              map[string]int // answers lost, by "op class"
}

// stormRecorded is the set of instance IDs the proxies' statuses record.
type stormRecorded struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (r *stormRecorded) set(proxies []crawlv1alpha1.Proxy) {
	ids := map[string]bool{}
	for _, p := range proxies {
		if _, id, ok := provider.SplitProviderID(p.Status.ProviderID); ok {
			ids[id] = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = ids
}

func (r *stormRecorded) has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ids[id]
}

// stormBlow strikes the provider every 100ms until ctx ends: an instance
// (one that target accepts) vanishes or stops, or the answer of a coming
// Create or Delete is lost.
func stormBlow(ctx context.Context, fp *stormProvider, seed uint64, target func(id string) bool) stormBlows {
	rng := rand.New(rand.NewPCG(seed, 2))
	b := stormBlows{lost: map[string]int{}}
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return b
		case <-ticker.C:
		}
		instances := slices.DeleteFunc(fp.Instances(), func(i provider.Instance) bool { return !target(i.ID) })
		switch r := rng.Float64(); {
		case r < 0.4 && len(instances) > 0:
			if fp.Vanish(instances[rng.IntN(len(instances))].ID) {
				b.vanished++
			}
		case r < 0.8 && len(instances) > 0:
			if fp.Stop(instances[rng.IntN(len(instances))].ID) {
				b.stopped++
			}
		default:
			op := fake.OpCreate
			if rng.IntN(3) == 0 {
				op = fake.OpDelete
			}
			class := stormClasses[rng.IntN(len(stormClasses))]
			fp.FailNextAfter(op, provider.WithClass(class, fmt.Errorf("%s (%s)", stormLost, provider.ClassName(class))), 1)
			b.lost[fmt.Sprintf("%s %s", op, provider.ClassName(class))]++
		}
	}
}

// stormStats counts what the user did to the fleet.
type stormStats struct {
	edited, deleted int
	unlatchedFailed int
	// deletingWithPermanent: proxies seen in Deleting with a permanent
	// error; nobody edits them (docs/decisions/0037-permanent-provider-error-while-deleting-retried.md: the deletion retries itself).
	deletingWithPermanent int
	// lostCreates: proxies deleted holding the instance of a Create whose
	// answer was lost; gaveUp: proxies deleted while the provider still held
	// their Create back.
	lostCreates, gaveUp int
}

// TestProviderFaultStorm: a fleet of Managed proxies on a provider that is
// slow and fails every way it can (quota, permanent, transient; before a
// call takes effect, after it, losing its answer, or acting on it late),
// while instances vanish and stop behind the controller's back and the user
// edits and deletes proxies, and un-latches those a permanent error failed
// (a spec edit). Once the storm ends the fleet converges: every proxy Ready
// with exactly one instance, its own, built from its current spec; deleted
// proxies gone with their instances; the instances of Creates the provider
// acted on after their proxies were gone collected by one GC round, so that
// deleting the rest leaves no instance at all.
func TestProviderFaultStorm(t *testing.T) {
	n := integration.Scaled(200, 1000)
	stormFor := integration.Scaled(20*time.Second, 2*time.Minute)
	const faultRate, faultSeed, testSeed = 0.1, 9, 20251130
	rng := rand.New(rand.NewPCG(testSeed, 1))

	fp := newStormProvider(
		fake.WithCallLatency(10*time.Millisecond),
		fake.WithProvisioningDelay(300*time.Millisecond),
		fake.WithDeletionDelay(300*time.Millisecond),
	)
	fp.SetRandomFaults(faultRate, stormClasses, faultSeed)
	// The first Creates time out, and the provider acts on them only once
	// the user has given up and deleted their proxies: the classic leak,
	// which only GC can collect. The next ones make their instance and lose
	// their answer, so their proxies latch Failed without knowing its ID.
	fp.HoldNextCreates(provider.Permanent(errors.New(stormTimedOut+" (permanent)")), 3)
	fp.FailNextAfter(fake.OpCreate, provider.Permanent(errors.New(stormLost+" (permanent)")), 3)

	h := controllertest.Start(t, shared.Get(t).Env.Config, controllertest.Options{
		Providers:       map[crawlv1alpha1.ProviderName]provider.Provider{crawlv1alpha1.ProviderLocal: fp},
		NamespacePrefix: "storm-",
		Workers:         integration.Scaled(8, 16),
		DriftPoll:       integration.Scaled(time.Second, 3*time.Second),
	})
	var stats stormStats
	uids := map[string]types.UID{} // every proxy created, by name
	deleted := map[string]bool{}
	var names []string // those not deleted
	for i := range n {
		name := fmt.Sprintf("s%04d", i)
		p := h.Create(&crawlv1alpha1.Proxy{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal},
		})
		uids[name] = p.UID
		names = append(names, name)
	}
	remove := func(name string) {
		if err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(h.Ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting %s: %v", name, err)
		}
		deleted[name] = true
		names = slices.DeleteFunc(names, func(s string) bool { return s == name })
	}

	// tend is the user, looking at the fleet. A proxy latched by a permanent
	// error is edited, which un-latches it (a deleting one is left alone: its
	// deletion retries by itself, docs/decisions/0037-permanent-provider-error-while-deleting-retried.md); during the
	// storm the user gets to only so many (budget; negative: all). Those that
	// hold no instance because their Create timed out the user gives up on
	// and deletes. Those that hold an instance their controller never learned
	// of (a Create whose answer was lost) wait for the storm to end; then
	// they are deleted, and the controller must find the instance; but one
	// whose instance runs is edited like the others, and its instance must
	// then not be adopted as built from the edited spec.
	checked := map[string]bool{}
	editedLostCreate := false
	tend := func(proxies []crawlv1alpha1.Proxy, budget int, stormOver bool) {
		var edits []string
		for _, p := range proxies {
			// (A proxy deleted since the list shows no deletion in it.)
			if deleted[p.Name] && p.DeletionTimestamp == nil || !stormLatched(&p) {
				continue
			}
			msg := stormCondition(&p).Message
			if key := fmt.Sprintf("%s@%d", p.Name, p.Generation); !checked[key] {
				checked[key] = true
				if !stormPermanentMessage(msg) {
					t.Errorf("%s latched by %q, which is no permanent error the test injected", p.Name, msg)
				}
			}
			inst, instanceExists := fp.Instance(provider.InstanceName(p.UID))
			lostCreate := p.DeletionTimestamp == nil && p.Status.ProviderID == "" && instanceExists
			switch {
			case strings.Contains(msg, stormTimedOut) && p.DeletionTimestamp == nil:
				remove(p.Name)
				stats.gaveUp++
			case lostCreate && !stormOver:
			case lostCreate && !editedLostCreate && inst.State == provider.StateRunning:
				editedLostCreate = true
				edits = append(edits, p.Name)
				stats.unlatchedFailed++
			case lostCreate:
				remove(p.Name)
				stats.lostCreates++
			case p.DeletionTimestamp != nil:
				stats.deletingWithPermanent++
			case budget == 0:
			default:
				budget--
				edits = append(edits, p.Name)
				stats.unlatchedFailed++
			}
		}
		stormEditAll(t, h, edits)
		stormMarkHealthy(h, proxies)
	}

	// The storm: the provider takes a blow every 100ms (stormBlow, in its
	// own goroutine, so that it keeps its pace whatever the API server's);
	// every half second the user tends the fleet, edits a proxy (a replace)
	// and sometimes deletes one, and the health engine reports on what runs
	// now. Blows strike only instances a status records, so that a lost
	// Create's instance is still there, running, when the storm ends.
	stormCtx, stopStorm := context.WithTimeout(h.Ctx, stormFor)
	defer stopStorm()
	var recorded stormRecorded
	blowsDone := make(chan stormBlows, 1)
	go func() { blowsDone <- stormBlow(stormCtx, fp, testSeed, recorded.has) }()
	ticker := time.NewTicker(500 * time.Millisecond)
	for stormCtx.Err() == nil {
		proxies := stormList(t, h)
		recorded.set(proxies)
		tend(proxies, 5, false)
		// The random edits and deletes leave the latched proxies to tend.
		var steady []string
		for _, p := range proxies {
			if p.DeletionTimestamp == nil && !deleted[p.Name] && !stormLatched(&p) {
				steady = append(steady, p.Name)
			}
		}
		if len(steady) > 0 {
			h.Update(steady[rng.IntN(len(steady))], stormEdit)
			stats.edited++
		}
		if rng.IntN(3) == 0 && len(steady) > 0 && len(names) > n/2 {
			remove(steady[rng.IntN(len(steady))])
			stats.deleted++
		}
		select {
		case <-ticker.C:
		case <-stormCtx.Done():
		}
	}
	ticker.Stop()
	blows := <-blowsDone
	fp.ResetFaults()
	stormEnd := time.Now()
	calls, errs := fp.counts()
	t.Logf("%d proxies, storm of %s (fault rate %v seed %d, test seed %d): calls %v, errors by class %v; instances vanished %d, stopped %d; answers lost %v",
		n, stormFor, faultRate, faultSeed, testSeed, calls, errs, blows.vanished, blows.stopped, blows.lost)

	// Then the fleet converges, the user still tending it.
	var converged stormProgress
	convergeCtx, stopConverging := context.WithTimeout(t.Context(), integration.Scaled(3*time.Minute, 10*time.Minute))
	defer stopConverging()
	_ = eventually.Poll(convergeCtx, 250*time.Millisecond, func(context.Context) error { // judged below
		proxies := stormList(t, h)
		tend(proxies, -1, true)
		if converged = stormCheck(proxies, fp, uids, names, deleted); !converged.ok() {
			return errors.New("not converged")
		}
		return nil
	})
	convergedAfter := time.Since(stormEnd)
	t.Logf("the user edited %d proxies (replaces) and deleted %d at random, un-latched %d Failed (and left alone %d sightings of Deleting with a permanent error), gave up on %d whose Create was held, deleted %d holding a lost Create",
		stats.edited, stats.deleted, stats.unlatchedFailed, stats.deletingWithPermanent, stats.gaveUp, stats.lostCreates)
	if !converged.ok() {
		t.Fatalf("not converged %s after the storm: %s", convergedAfter.Round(time.Second), converged)
	}

	// Each proxy's instance was built from the spec it records, the one
	// whose lost Create was adopted after an edit included.
	if !editedLostCreate {
		t.Error("no proxy was edited while holding the running instance of a lost Create: adoption went unchecked")
	}
	for _, p := range converged.proxies {
		_, id, _ := provider.SplitProviderID(p.Status.ProviderID)
		if got, want := fp.builtFrom(id), p.Annotations[crawlv1alpha1.SpecHashAnnotation]; got != want {
			t.Errorf("%s: instance %s was built from spec hash %q, the proxy records %q (it serves an older spec)", p.Name, id, got, want)
		}
	}

	// No proxy was deleted leaving its instance behind, whether its status
	// recorded it or not; then the held Creates take effect, their proxies
	// long gone, and one GC round collects those orphans and nothing else.
	if len(converged.orphans) != 0 {
		t.Errorf("instances %v outlived their deleted proxies", converged.orphans)
	}
	released := fp.ReleaseHeld()
	if released == 0 {
		t.Fatal("no held Create was released: the GC check would pass without an orphan to collect")
	}
	orphans := stormCheck(stormList(t, h), fp, uids, names, deleted).orphans
	collected := stormCollect(t, h, fp)
	if collected != len(orphans) || collected < released {
		t.Errorf("GC collected %d instances, want the %d orphans %v (%d released)", collected, len(orphans), orphans, released)
	}
	t.Logf("converged %s after the storm ended; released %d held Creates; GC collected %d orphans", convergedAfter.Round(time.Millisecond), released, collected)
	h.Eventually(time.Minute, "orphans gone", func() (bool, string) {
		left := stormCheck(stormList(t, h), fp, uids, names, deleted)
		return left.ok() && len(left.orphans) == 0, left.String()
	})

	// Deleting the rest leaves no instance at all.
	if err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).DeleteCollection(h.Ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	h.Eventually(2*time.Minute, "all deleted", func() (bool, string) {
		proxies, instances := stormList(t, h), fp.Instances()
		return len(proxies) == 0 && len(instances) == 0, fmt.Sprintf("%d proxies and %d instances left", len(proxies), len(instances))
	})
}

// stormEdit changes the spec so that the instance must be replaced.
func stormEdit(p *crawlv1alpha1.Proxy) {
	p.Spec.CloudInit = &crawlv1alpha1.CloudInit{Inline: ptr.To(fmt.Sprintf("#cloud-config\n# edit %d\n", p.Generation))}
}

// stormEditAll edits the proxies, a few at a time.
func stormEditAll(t *testing.T, h *controllertest.Harness, names []string) {
	t.Helper()
	proxies := h.Crawl.CrawlV1alpha1().Proxies(h.NS)
	var g errgroup.Group
	g.SetLimit(8)
	for _, name := range names {
		g.Go(func() error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				p, err := proxies.Get(h.Ctx, name, metav1.GetOptions{})
				if err == nil {
					stormEdit(p)
					_, err = proxies.Update(h.Ctx, p, metav1.UpdateOptions{})
				}
				if apierrors.IsNotFound(err) {
					return nil // deleted meanwhile (a user's delete finishing); the final check counts it
				}
				return err
			})
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("editing proxies: %v", err)
	}
}

// stormList lists the test's proxies.
func stormList(t *testing.T, h *controllertest.Harness) []crawlv1alpha1.Proxy {
	t.Helper()
	list, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).List(h.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing proxies: %v", err)
	}
	return list.Items
}

func stormCondition(p *crawlv1alpha1.Proxy) *metav1.Condition {
	c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
	if c == nil {
		return &metav1.Condition{}
	}
	return c
}

// stormLatched: a permanent error at this generation stopped the
// controller, which waits for a spec edit.
func stormLatched(p *crawlv1alpha1.Proxy) bool {
	c := stormCondition(p)
	return c.Reason == controller.ReasonPermanentError && c.ObservedGeneration == p.Generation
}

// stormPermanentMessage: the message is that of a permanent error the test
// injected (at random, or as a lost answer).
func stormPermanentMessage(msg string) bool {
	return strings.Contains(msg, "injected random permanent fault") ||
		strings.Contains(msg, stormLost+" (permanent)") || strings.Contains(msg, stormTimedOut+" (permanent)")
}

// stormMarkHealthy plays the health engine: each proxy whose instance runs
// is reported healthy at the address its status holds, once per address.
func stormMarkHealthy(h *controllertest.Harness, proxies []crawlv1alpha1.Proxy) {
	for _, p := range proxies {
		if p.DeletionTimestamp != nil || p.Status.IP == "" ||
			!meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned) {
			continue
		}
		addr := net.JoinHostPort(p.Status.IP, strconv.Itoa(int(p.Status.Port)))
		key := h.Key(p.Name)
		if v, ok := h.Health.Verdict(key); ok && v.Address == addr {
			continue
		}
		h.Health.Set(key, controllertest.Verdict(addr, true))
	}
}

// stormProgress is how far the fleet is from converged.
type stormProgress struct {
	proxies  []crawlv1alpha1.Proxy
	problems []string
	// orphans are instances no live proxy owns (by their proxy-uid tag).
	orphans []string
}

func (s stormProgress) ok() bool { return len(s.problems) == 0 }

func (s stormProgress) String() string {
	return fmt.Sprintf("%d problems: %s", len(s.problems), strings.Join(scaleFirst(s.problems, 10), "; "))
}

// stormCheck compares the proxies listed and the provider's instances with
// what the test expects: the names not deleted, each Ready at its
// generation with exactly one instance, its own and running at its
// address; the deleted ones gone.
func stormCheck(proxies []crawlv1alpha1.Proxy, fp *stormProvider, uids map[string]types.UID, names []string, deleted map[string]bool) stormProgress {
	s := stormProgress{proxies: proxies}
	byUID := map[types.UID][]provider.Instance{}
	for _, inst := range fp.Instances() {
		uid := types.UID(inst.Tags[crawlv1alpha1.TagProxyUID])
		byUID[uid] = append(byUID[uid], inst)
	}
	listed := map[string]*crawlv1alpha1.Proxy{}
	for i := range proxies {
		p := &proxies[i]
		listed[p.Name] = p
		if deleted[p.Name] {
			s.problems = append(s.problems, fmt.Sprintf("%s deleted but still there (phase %s, %s)", p.Name, p.Status.Phase, stormCondition(p).Message))
		}
		if _, ok := uids[p.Name]; !ok || p.UID != uids[p.Name] {
			s.problems = append(s.problems, fmt.Sprintf("%s is not a proxy the test created", p.Name))
		}
	}
	live := map[types.UID]bool{}
	for _, name := range names {
		p, ok := listed[name]
		if !ok {
			s.problems = append(s.problems, name+" is missing")
			continue
		}
		live[p.UID] = true
		if problem := stormProxyProblem(p, byUID[p.UID]); problem != "" {
			s.problems = append(s.problems, name+": "+problem)
		}
	}
	for uid, insts := range byUID {
		if !live[uid] {
			for _, inst := range insts {
				s.orphans = append(s.orphans, inst.ID)
			}
		}
	}
	slices.Sort(s.orphans)
	return s
}

// stormProxyProblem says what keeps a live proxy from converged, "" when
// nothing does; instances are those tagged with its UID.
func stormProxyProblem(p *crawlv1alpha1.Proxy, instances []provider.Instance) string {
	switch {
	case p.Status.Phase != crawlv1alpha1.PhaseReady:
		return fmt.Sprintf("phase %q (%s)", p.Status.Phase, stormCondition(p).Message)
	case p.Status.ObservedGeneration != p.Generation:
		return fmt.Sprintf("generation %d observed, %d stored", p.Status.ObservedGeneration, p.Generation)
	case len(instances) != 1:
		return fmt.Sprintf("%d instances", len(instances))
	}
	inst := instances[0]
	if want := provider.ProviderID(string(crawlv1alpha1.ProviderLocal), inst.ID); p.Status.ProviderID != want {
		return fmt.Sprintf("providerID %q, its instance is %q", p.Status.ProviderID, want)
	}
	if inst.State != provider.StateRunning || inst.IP != p.Status.IP || inst.Port != p.Status.Port {
		return fmt.Sprintf("instance %s is %s at %s:%d, the status says %s:%d", inst.ID, inst.State, inst.IP, inst.Port, p.Status.IP, p.Status.Port)
	}
	return ""
}

// stormCollect runs one GC round against the provider, with an informer
// of its own on the test's namespace, and returns how many instances it
// deleted.
func stormCollect(t *testing.T, h *controllertest.Harness, fp *stormProvider) int {
	t.Helper()
	ctx, cancel := context.WithCancel(h.Ctx)
	defer cancel()
	factory := crawlinformers.NewSharedInformerFactoryWithOptions(h.Crawl, 0, crawlinformers.WithNamespace(h.NS))
	proxies := factory.Crawl().V1alpha1().Proxies()
	lister := proxies.Lister()
	factory.Start(ctx.Done())
	defer func() {
		cancel() // before Shutdown, which waits for the informer to stop
		factory.Shutdown()
	}()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("the %v cache did not sync", typ)
		}
	}
	collector, err := gc.New(gc.Config{
		Providers: map[crawlv1alpha1.ProviderName]provider.Provider{crawlv1alpha1.ProviderLocal: fp},
		Proxies:   lister,
		Live:      h.Crawl,
		Interval:  time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	collected, err := collector.CollectOnce(ctx)
	if err != nil {
		t.Errorf("GC round: %v", err)
	}
	return collected
}
