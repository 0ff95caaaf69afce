package auth

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
)

// t0 is when the tests' fake clocks start.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// reviewer plays the API server's TokenReview and SubjectAccessReview.
type reviewer struct {
	tokens      map[string]authenticationv1.UserInfo
	allowed     func(authorizationv1.SubjectAccessReviewSpec) bool
	failReviews error
	tokenCalls  int
	accessCalls int
	lastAccess  authorizationv1.SubjectAccessReviewSpec
}

func (r *reviewer) client() *kubefake.Clientset {
	c := kubefake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r.tokenCalls++
		if r.failReviews != nil {
			return true, nil, r.failReviews
		}
		review := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		user, ok := r.tokens[review.Spec.Token]
		review.Status = authenticationv1.TokenReviewStatus{Authenticated: ok, User: user}
		return true, review, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r.accessCalls++
		if r.failReviews != nil {
			return true, nil, r.failReviews
		}
		review := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		r.lastAccess = review.Spec
		review.Status.Allowed = r.allowed(review.Spec)
		if !review.Status.Allowed {
			review.Status.Reason = "no RBAC rule"
		}
		return true, review, nil
	})
	return c
}

func TestKubernetesAuthenticate(t *testing.T) {
	r := &reviewer{tokens: map[string]authenticationv1.UserInfo{
		"sa-token": {Username: "system:serviceaccount:a:crawler", UID: "u1", Groups: []string{"system:serviceaccounts"}, Extra: map[string]authenticationv1.ExtraValue{"k": {"v"}}},
	}}
	clk := clocktesting.NewFakeClock(t0)
	auth := NewKubernetes(r.client(), KubernetesOptions{Clock: clk, Audiences: []string{"proxy-operator"}})
	ctx := context.Background()

	user, err := auth.Authenticate(ctx, "sa-token")
	if err != nil {
		t.Fatal(err)
	}
	want := User{Name: "system:serviceaccount:a:crawler", UID: "u1", Groups: []string{"system:serviceaccounts"}, Extra: map[string][]string{"k": {"v"}}}
	if diff := cmp.Diff(want, user); diff != "" {
		t.Errorf("user (-want +got):\n%s", diff)
	}
	for name, token := range map[string]string{"no token": "", "a rejected token": "forged"} {
		if _, err := auth.Authenticate(ctx, token); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: err = %v, want ErrUnauthenticated", name, err)
		}
	}
	// Answers are cached, rejections too; no token needs no review.
	for range 3 {
		_, _ = auth.Authenticate(ctx, "sa-token")
		_, _ = auth.Authenticate(ctx, "forged")
	}
	if r.tokenCalls != 2 {
		t.Errorf("%d TokenReviews, want 2 (one per token)", r.tokenCalls)
	}
	// Until the TTL passes.
	clk.Step(DefaultCacheTTL + time.Second)
	_, _ = auth.Authenticate(ctx, "sa-token")
	if r.tokenCalls != 3 {
		t.Errorf("%d TokenReviews after the TTL, want 3", r.tokenCalls)
	}
	// Errors are not cached, and are not ErrUnauthenticated (the server answers 503).
	r.failReviews = errors.New("etcd is down")
	clk.Step(DefaultCacheTTL + time.Second)
	for range 2 {
		if _, err := auth.Authenticate(ctx, "sa-token"); err == nil || errors.Is(err, ErrUnauthenticated) {
			t.Errorf("failing review: err = %v, want a non-authentication error", err)
		}
	}
	if r.tokenCalls != 5 {
		t.Errorf("%d TokenReviews with errors, want 5 (errors are not cached)", r.tokenCalls)
	}
}

func TestKubernetesAuthorize(t *testing.T) {
	r := &reviewer{allowed: func(spec authorizationv1.SubjectAccessReviewSpec) bool {
		return spec.ResourceAttributes.Namespace == "a"
	}}
	clk := clocktesting.NewFakeClock(t0)
	auth := NewKubernetes(r.client(), KubernetesOptions{Clock: clk})
	ctx := context.Background()
	user := User{Name: "alice", UID: "u1", Groups: []string{"g2", "g1"}, Extra: map[string][]string{"scopes": {"x"}}}

	allowed, _, err := auth.Authorize(ctx, user, Attributes{Verb: VerbCreate, Namespace: "a"})
	if err != nil || !allowed {
		t.Fatalf("Authorize in a: %v, %v", allowed, err)
	}
	wantSpec := authorizationv1.SubjectAccessReviewSpec{
		User: "alice", UID: "u1", Groups: []string{"g2", "g1"},
		Extra: map[string]authorizationv1.ExtraValue{"scopes": {"x"}},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: "a", Verb: "create", Group: "crawl.proxyfleet.io", Version: "v1alpha1", Resource: "proxies", Subresource: "leases",
		},
	}
	if diff := cmp.Diff(wantSpec, r.lastAccess); diff != "" {
		t.Errorf("SubjectAccessReview (-want +got):\n%s", diff)
	}
	allowed, reason, err := auth.Authorize(ctx, user, Attributes{Verb: VerbCreate, Namespace: "b"})
	if err != nil || allowed || reason == "" {
		t.Errorf("Authorize in b: %v %q %v, want denied with a reason", allowed, reason, err)
	}
	// Both answers are cached per user, verb and namespace.
	for range 3 {
		_, _, _ = auth.Authorize(ctx, user, Attributes{Verb: VerbCreate, Namespace: "a"})
		_, _, _ = auth.Authorize(ctx, user, Attributes{Verb: VerbCreate, Namespace: "b"})
	}
	if r.accessCalls != 2 {
		t.Errorf("%d SubjectAccessReviews, want 2", r.accessCalls)
	}
	for name, other := range map[string]struct {
		user  User
		attrs Attributes
	}{
		"another verb":      {user: user, attrs: Attributes{Verb: VerbDelete, Namespace: "a"}},
		"another user":      {user: User{Name: "bob", UID: "u1", Groups: user.Groups}, attrs: Attributes{Verb: VerbCreate, Namespace: "a"}},
		"another group set": {user: User{Name: "alice", UID: "u1", Groups: []string{"g1"}}, attrs: Attributes{Verb: VerbCreate, Namespace: "a"}},
	} {
		before := r.accessCalls
		_, _, _ = auth.Authorize(ctx, other.user, other.attrs)
		if r.accessCalls != before+1 {
			t.Errorf("%s: answered from the cache", name)
		}
	}
	r.failReviews = errors.New("timeout")
	clk.Step(DefaultCacheTTL + time.Second)
	if _, _, err := auth.Authorize(ctx, user, Attributes{Verb: VerbCreate, Namespace: "a"}); err == nil {
		t.Error("failing review: no error")
	}
}

// act-for is asked about a resource of its own, in an API group that holds
// nothing else, across the cluster: no rule on proxies (wildcards included)
// and no wildcard over crawl.proxyfleet.io matches it
// (docs/decisions/0222-act-for-is-its-own-api-group.md).
func TestSubjectAccessReviewAttributes(t *testing.T) {
	for name, tc := range map[string]struct {
		attrs Attributes
		want  authorizationv1.ResourceAttributes
	}{
		"acquire": {
			attrs: Attributes{Verb: VerbCreate, Namespace: "crawl"},
			want:  authorizationv1.ResourceAttributes{Namespace: "crawl", Verb: "create", Group: "crawl.proxyfleet.io", Version: "v1alpha1", Resource: "proxies", Subresource: "leases"},
		},
		"list across namespaces": {
			attrs: Attributes{Verb: VerbList},
			want:  authorizationv1.ResourceAttributes{Verb: "list", Group: "crawl.proxyfleet.io", Version: "v1alpha1", Resource: "proxies", Subresource: "leases"},
		},
		"act-for": {
			attrs: Attributes{Verb: VerbActFor},
			want:  authorizationv1.ResourceAttributes{Verb: "act-for", Group: "gateway.crawl.proxyfleet.io", Resource: "callers"},
		},
		"act-for is never namespaced": {
			attrs: Attributes{Verb: VerbActFor, Namespace: "crawl"},
			want:  authorizationv1.ResourceAttributes{Verb: "act-for", Group: "gateway.crawl.proxyfleet.io", Resource: "callers"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := &reviewer{allowed: func(authorizationv1.SubjectAccessReviewSpec) bool { return true }}
			auth := NewKubernetes(r.client(), KubernetesOptions{Clock: clocktesting.NewFakeClock(t0)})
			if _, _, err := auth.Authorize(context.Background(), User{Name: "gw"}, tc.attrs); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(&tc.want, r.lastAccess.ResourceAttributes); diff != "" {
				t.Errorf("SubjectAccessReview's resource attributes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecisionKeyIsUnambiguous(t *testing.T) {
	keys := map[[32]byte]string{}
	for name, u := range map[string]User{
		"groups a,b":     {Name: "u", Groups: []string{"a", "b"}},
		"groups ab":      {Name: "u", Groups: []string{"ab"}},
		"group a, ext b": {Name: "u", Groups: []string{"a"}, Extra: map[string][]string{"b": nil}},
		"name u;a":       {Name: "u;a"},
		"uid a":          {Name: "u", UID: "a"},
		"extra b=c":      {Name: "u", Extra: map[string][]string{"b": {"c"}}},
		"extra b=,c":     {Name: "u", Extra: map[string][]string{"b": {"", "c"}}},
	} {
		k := decisionKey(u, Attributes{Verb: "get"})
		if other, ok := keys[k]; ok {
			t.Errorf("%s and %s share a cache key", name, other)
		}
		keys[k] = name
	}
	// Group order does not matter.
	if decisionKey(User{Groups: []string{"a", "b"}}, Attributes{}) != decisionKey(User{Groups: []string{"b", "a"}}, Attributes{}) {
		t.Error("group order changes the key")
	}
}

func TestNoAuthAllowsAndWarns(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	auth := NewNone(logger)
	if _, err := auth.Authenticate(context.Background(), ""); err != nil {
		t.Errorf("Authenticate: %v", err)
	}
	if ok, _, err := auth.Authorize(context.Background(), User{}, Attributes{Verb: VerbDelete}); !ok || err != nil {
		t.Errorf("Authorize: %v %v", ok, err)
	}
	if log := logger.GetSink().(ktesting.Underlier).GetBuffer().String(); !strings.Contains(log, "WITHOUT authentication") {
		t.Errorf("no loud warning logged; log:\n%s", log)
	}
}

// New tokens are reviewed within a budget of each client address (carried
// by WithClientAddr) as well as the overall one, so that one caller
// spraying tokens does not spend everybody's reviews.
func TestTokenReviewBudgetIsPerSource(t *testing.T) {
	r := &reviewer{tokens: map[string]authenticationv1.UserInfo{}}
	auth := NewKubernetes(r.client(), KubernetesOptions{
		Clock:                   clocktesting.NewFakeClock(t0),
		TokenReviewQPS:          1000,
		TokenReviewBurst:        1000,
		TokenReviewPerSourceQPS: 0.001,
		// Two new tokens a source, then its share is spent.
		TokenReviewPerSourceBurst: 2,
	})
	from := func(addr string) context.Context { return WithClientAddr(context.Background(), addr) }
	for i, call := range []struct {
		ctx  context.Context
		want error
	}{
		{from("10.0.0.1"), ErrUnauthenticated},
		{from("10.0.0.1"), ErrUnauthenticated},
		{from("10.0.0.1"), ErrReviewBudget},
		{from("10.0.0.2"), ErrUnauthenticated},
		{from("10.0.0.2"), ErrUnauthenticated},
		{from("10.0.0.2"), ErrReviewBudget},
		{from("10.0.0.1"), ErrReviewBudget},
	} {
		// Every token is new and unknown: reviewed (then refused) or not reviewed at all.
		if _, err := auth.Authenticate(call.ctx, "token-"+strings.Repeat("x", i)); !errors.Is(err, call.want) {
			t.Errorf("call %d from %q: err = %v, want %v", i, clientAddr(call.ctx), err, call.want)
		}
	}
	if r.tokenCalls != 4 {
		t.Errorf("%d TokenReviews, want 4 (two a source)", r.tokenCalls)
	}
}
