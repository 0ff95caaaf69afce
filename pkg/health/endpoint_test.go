package health

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/cache"
)

func jobAt(name, address string) job {
	return job{key: cache.ObjectName{Name: name}, state: &proxyState{address: address}}
}

// The bound per endpoint: jobs over it wait in order, each finished probe
// hands its slot to the next waiting job of its endpoint, and other
// endpoints are not held up.
func TestEndpointQueues(t *testing.T) {
	q := newEndpointQueues(2)
	var admitted []string
	for _, j := range []job{jobAt("a1", "A"), jobAt("a2", "A"), jobAt("a3", "A"), jobAt("b1", "B"), jobAt("a4", "A")} {
		if q.admit(j) {
			admitted = append(admitted, j.key.Name)
		}
	}
	if diff := cmp.Diff([]string{"a1", "a2", "b1"}, admitted); diff != "" {
		t.Errorf("admitted (-want +got):\n%s", diff)
	}
	var next []string
	for range 4 {
		j, ok := q.finished("A")
		next = append(next, fmt.Sprintf("%s %v", j.key.Name, ok))
	}
	// a3 and a4 take the two slots in turn; then the slots free up.
	if diff := cmp.Diff([]string{"a3 true", "a4 true", " false", " false"}, next); diff != "" {
		t.Errorf("finished(A) (-want +got):\n%s", diff)
	}
	if _, ok := q.byKey["A"]; ok {
		t.Error("endpoint A is still tracked with nothing in flight")
	}
	if _, ok := q.finished("B"); ok || len(q.byKey) != 0 {
		t.Errorf("after B's probe: %d endpoints tracked, want none", len(q.byKey))
	}
}

// A tick over a fleet behind one address dispatches the bound's worth and
// takes the rest: none is dispatched twice, and each runs after a finished
// probe of the address, in the worker that finished it.
func TestTickBoundsProbesPerEndpoint(t *testing.T) {
	f := newFixture(t)
	f.engine.endpoints = newEndpointQueues(3)
	f.tick() // the fleet met (empty): proxies from now on are probed at once
	for i := range 8 {
		f.put(testProxy(fmt.Sprintf("p%d", i)))
	}
	if got := len(f.tick()); got != 3 {
		t.Fatalf("first tick dispatched %d probes of one address, want the bound, 3", got)
	}
	f.clock.Step(testTick)
	if got := len(f.tick()); got != 0 {
		t.Errorf("next tick dispatched %d, want 0: the other 5 wait for the address", got)
	}
	ran := 0
	for {
		f.engine.mu.Lock()
		_, ok := f.engine.endpoints.finished("127.0.0.1:3128")
		f.engine.mu.Unlock()
		if !ok {
			break
		}
		ran++
	}
	if ran != 5 {
		t.Errorf("%d waiting jobs ran after finished probes, want 5", ran)
	}
}
