package dashboard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
)

// reviewer allows list across all namespaces to "admin" and in the
// namespaces of allowed to "tenant", nothing to anyone else, and counts
// the reviews it answers.
type reviewer struct {
	allowed map[string]bool
	fail    bool
	reviews atomic.Int64
	// gate, when set, holds each review until it is closed.
	gate chan struct{}
}

func (r *reviewer) Authorize(_ context.Context, u auth.User, attrs auth.Attributes) (bool, string, error) {
	r.reviews.Add(1)
	if r.gate != nil {
		<-r.gate
	}
	if r.fail {
		return false, "", errors.New("the API server is away")
	}
	if attrs.Namespace == "" {
		return u.Name == "admin", "", nil
	}
	return u.Name == "tenant" && r.allowed[attrs.Namespace], "", nil
}

// boundIn is a Bindings that names the same namespaces for every user.
type boundIn struct {
	namespaces []string
	unsynced   bool
}

func (b boundIn) Namespaces(auth.User) ([]string, bool) { return b.namespaces, !b.unsynced }

func TestAccessDecides(t *testing.T) {
	view := []string{"a", "b", "c", "d"}
	tests := map[string]struct {
		user        string
		allowed     map[string]bool
		bindings    Bindings
		maxReviews  int
		fail        bool
		want        visibility
		wantErr     error
		wantReviews int64
	}{
		"allowed across all namespaces: one review": {
			user: "admin", bindings: boundIn{namespaces: []string{"a", "b"}},
			want: visibility{all: true, complete: true}, wantReviews: 1,
		},
		"bound to no role: one review, nothing visible": {
			user: "nobody", allowed: map[string]bool{"a": true}, bindings: boundIn{},
			want: visibility{visible: map[string]bool{}, complete: true}, wantReviews: 1,
		},
		"only the bound namespaces of the view are reviewed": {
			user: "tenant", allowed: map[string]bool{"a": true, "c": true}, bindings: boundIn{namespaces: []string{"a", "b", "z"}},
			want: visibility{visible: map[string]bool{"a": true}, complete: true}, wantReviews: 3,
		},
		"without Bindings every namespace of the view is": {
			user: "tenant", allowed: map[string]bool{"a": true, "c": true},
			want: visibility{visible: map[string]bool{"a": true, "c": true}, complete: true}, wantReviews: 5,
		},
		"the bound: the first namespaces, then none": {
			user: "tenant", allowed: map[string]bool{"a": true, "d": true}, maxReviews: 2,
			want: visibility{visible: map[string]bool{"a": true}, complete: false}, wantReviews: 3,
		},
		"RoleBindings not known yet": {
			user: "tenant", bindings: boundIn{unsynced: true}, wantErr: errBindingsUnknown, wantReviews: 1,
		},
		"the reviews fail": {user: "tenant", fail: true, wantErr: errors.New("any"), wantReviews: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := &reviewer{allowed: tc.allowed, fail: tc.fail}
			a := newAccess(r, tc.bindings, 0, tc.maxReviews, nil)
			got, err := a.decide(t.Context(), auth.User{Name: tc.user}, view)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("decide: %v", err)
			case tc.wantErr != nil && err == nil:
				t.Fatalf("decide = %+v, want an error", got)
			case errors.Is(tc.wantErr, errBindingsUnknown) && !errors.Is(err, errBindingsUnknown):
				t.Fatalf("decide: %v, want %v", err, errBindingsUnknown)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(visibility{})); diff != "" {
				t.Errorf("visibility (-want +got):\n%s", diff)
			}
			if n := r.reviews.Load(); n != tc.wantReviews {
				t.Errorf("%d reviews, want %d", n, tc.wantReviews)
			}
		})
	}
}

// An identity's access is kept for the TTL: asking again costs nothing,
// however many ask at once; after the TTL it is asked anew. A namespace
// new to the view costs its one review.
func TestAccessIsKeptPerIdentity(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Now())
	r := &reviewer{allowed: map[string]bool{"a": true}, gate: make(chan struct{})}
	a := newAccess(r, boundIn{namespaces: []string{"a", "b"}}, 10*time.Second, 0, clock)
	nobody, tenant := auth.User{Name: "nobody", Groups: []string{"system:authenticated"}}, auth.User{Name: "tenant"}

	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if v, err := a.decide(context.Background(), nobody, []string{"a"}); err != nil || !v.nothing() {
				t.Errorf("nobody: %+v, %v", v, err)
			}
		})
	}
	close(r.gate) // the reviews answer only once all ten asked
	wg.Wait()
	if n := r.reviews.Load(); n > 2 { // across all, and a (bound for everyone here)
		t.Errorf("ten concurrent requests of one identity made %d reviews, want at most 2", n)
	}

	r.reviews.Store(0)
	for range 3 {
		if _, err := a.decide(t.Context(), nobody, []string{"a"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.reviews.Load(); n != 0 {
		t.Errorf("asking again within the TTL made %d reviews", n)
	}
	if _, err := a.decide(t.Context(), tenant, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if v, _ := a.decide(t.Context(), tenant, []string{"a", "b"}); !v.see("a") || v.see("b") {
		t.Errorf("tenant sees %+v, want a only", v)
	}
	if n := r.reviews.Load(); n != 3 { // tenant: all, a; then b, new to the view
		t.Errorf("another identity made %d reviews, want 3", n)
	}
	clock.SetTime(clock.Now().Add(11 * time.Second))
	r.reviews.Store(0)
	if _, err := a.decide(t.Context(), nobody, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if n := r.reviews.Load(); n != 2 {
		t.Errorf("after the TTL: %d reviews, want 2 (asked anew)", n)
	}
}

// A review that fails is not kept: the next request asks again.
func TestAccessKeepsNoFailure(t *testing.T) {
	r := &reviewer{fail: true}
	a := newAccess(r, nil, 0, 0, nil)
	if _, err := a.decide(t.Context(), auth.User{Name: "admin"}, nil); err == nil {
		t.Fatal("no error from a failing review")
	}
	r.fail = false
	if v, err := a.decide(t.Context(), auth.User{Name: "admin"}, nil); err != nil || !v.all {
		t.Errorf("after the failure: %+v, %v; want all", v, err)
	}
}

func TestIdentityKeyTellsUsersApart(t *testing.T) {
	users := []auth.User{
		{Name: "a"}, {Name: "a", UID: "1"}, {Name: "a", Groups: []string{"g"}}, {Name: "a", Groups: []string{"g", "h"}},
		{Name: "a", Extra: map[string][]string{"k": {"v"}}}, {Name: "a;", UID: ""}, {Name: "a", UID: ";"},
	}
	seen := map[[32]byte]int{}
	for i, u := range users {
		k := identityKey(u)
		if j, ok := seen[k]; ok {
			t.Errorf("users %d and %d share a key: %+v, %+v", j, i, users[j], u)
		}
		seen[k] = i
	}
	if identityKey(auth.User{Name: "a", Groups: []string{"h", "g"}}) != identityKey(users[3]) {
		t.Error("the order of the groups changes the key")
	}
}
