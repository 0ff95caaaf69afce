package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// The verbs of the lease API, checked on crawl.proxyfleet.io proxies/leases.
const (
	VerbCreate = "create" // acquire
	VerbUpdate = "update" // renew
	VerbDelete = "delete" // release
	VerbGet    = "get"    // one lease
	VerbList   = "list"   // leases, proxies
	// VerbActFor lets a caller (the gateway tier's identity) make calls as
	// the users it authenticated (pkg/lease/server's requests.go); only the gateway's role
	// grants it. It is checked on a resource of its own, ActForResource
	// in ActForGroup, cluster-wide: no rule on proxies, wildcard verbs or
	// resources included, and no wildcard over crawl.proxyfleet.io grants
	// it (docs/decisions/0222-act-for-is-its-own-api-group.md).
	VerbActFor = "act-for"
)

// The resource every lease call but act-for is authorized on.
const (
	authResource    = "proxies"
	authSubresource = "leases"
)

// The resource act-for is authorized on: an API group that serves nothing
// and holds nothing else, so that only a rule naming it (or apiGroups "*")
// grants it. `kubectl auth can-i act-for callers.gateway.crawl.proxyfleet.io`.
const (
	ActForGroup    = "gateway.crawl.proxyfleet.io"
	ActForResource = "callers"
)

// Defaults of KubernetesOptions.
const (
	DefaultCacheTTL  = 10 * time.Second
	DefaultCacheSize = 4096
	// A token the cache does not know costs a TokenReview; new tokens get
	// this budget (per second, burst), and each client address a share of
	// it, so that a flood of invented tokens from one place is refused
	// cheaply and cannot queue up reviews for everyone else.
	DefaultTokenReviewQPS            = 25
	DefaultTokenReviewBurst          = 50
	DefaultTokenReviewPerSourceQPS   = 5
	DefaultTokenReviewPerSourceBurst = 10
	// MaxTokenBytes is the longest bearer token reviewed at all.
	MaxTokenBytes = 8 << 10
	// tokenSources bounds the per-address budgets kept.
	tokenSources = 4096
)

// reviewTimeout bounds one TokenReview, which concurrent callers share.
const reviewTimeout = 10 * time.Second

// ErrUnauthenticated: no bearer token, or one the authenticator rejects (401).
var ErrUnauthenticated = errors.New("unauthenticated")

// ErrReviewBudget: the token is new and the TokenReview budget (overall or
// of the caller's address) is spent; the caller retries (503 AuthUnavailable).
var ErrReviewBudget = errors.New("too many new tokens to review; retry")

// clientAddrKey carries a request's client address to the Authenticator.
type clientAddrKey struct{}

// WithClientAddr returns ctx carrying the caller's address (host only), by
// which the Kubernetes authenticator shares out its TokenReview budget.
func WithClientAddr(ctx context.Context, addr string) context.Context {
	return &clientAddrContext{Context: ctx, addr: addr}
}

// clientAddrContext is context.WithValue for the client address, in one
// allocation instead of two (the value is boxed only when read, on a
// review): every lease API call makes one (docs/decisions/0153-lease-api-decodes-request-without-maps.md).
type clientAddrContext struct {
	context.Context
	addr string
}

func (c *clientAddrContext) Value(key any) any {
	if key == (clientAddrKey{}) {
		return c.addr
	}
	return c.Context.Value(key)
}

// actingForKey marks a call made by a caller acting for a user (the
// gateway tier), whose act-for permission the server checked.
type actingForKey struct{}

// WithActingFor returns ctx marked as a call the gateway tier makes for a
// user: only such calls get the credentials of a gateway-only proxy.
func WithActingFor(ctx context.Context) context.Context {
	return context.WithValue(ctx, actingForKey{}, true)
}

// ActingFor reports whether ctx is a call the gateway tier makes for a user.
func ActingFor(ctx context.Context) bool {
	v, _ := ctx.Value(actingForKey{}).(bool)
	return v
}

// ErrGatewayOnly: the proxy's credentials go only to the gateway tier,
// which uses them itself (crawlv1alpha1.GatewayOnlyLabel); a crawler
// reaches the proxy through the gateway (403 GatewayOnly).
var ErrGatewayOnly = errors.New("the proxy's credentials go only to the gateway")

func clientAddr(ctx context.Context) string {
	addr, _ := ctx.Value(clientAddrKey{}).(string)
	return addr
}

// plausibleToken is the cheap refusal: a bearer token is RFC 6750's
// b64token (letters, digits, "-._~+/", then "=" padding) of bounded length.
// Anything else cannot be a token any API server issues, and costs no review.
func plausibleToken(token string) bool {
	if len(token) == 0 || len(token) > MaxTokenBytes {
		return false
	}
	padding := false
	for i := 0; i < len(token); i++ {
		c := token[i]
		switch {
		case c == '=':
			padding = true
		case padding:
			return false
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte("-._~+/", c) >= 0:
		default:
			return false
		}
	}
	return token[0] != '='
}

// User is an authenticated caller.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Identity is what a lease is bound to (AcquireRequest.Owner): the user's
// name and UID, so that a ServiceAccount deleted and recreated under the
// same name is another identity. Every token of one identity reaches the
// same leases.
func (u User) Identity() string {
	if u.UID == "" {
		return u.Name
	}
	return u.Name + "\x00" + u.UID
}

// Attributes are what a call asks to do: a verb in a namespace ("" means
// across all namespaces).
type Attributes struct {
	Verb      string
	Namespace string
}

// Authenticator turns a bearer token ("" when the request had none) into a
// user. It returns an error wrapping ErrUnauthenticated for a missing or
// rejected token, and any other error when it could not decide.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (User, error)
}

// Authorizer decides whether a user may do attrs. reason explains a denial
// and may be shown to the caller. An error means it could not decide.
type Authorizer interface {
	Authorize(ctx context.Context, user User, attrs Attributes) (allowed bool, reason string, err error)
}

// None lets everyone do everything (--lease-auth=none): local development only.
type None struct{}

// NewNone returns None and says loudly that the lease API is open.
func NewNone(logger klog.Logger) None {
	logger.Info("WARNING: the lease API runs WITHOUT authentication or authorization (--lease-auth=none): " +
		"anyone who can reach it can lease every proxy and read its credentials. Use it for local development only.")
	return None{}
}

func (None) Authenticate(context.Context, string) (User, error) {
	return User{Name: "system:anonymous"}, nil
}

func (None) Authorize(context.Context, User, Attributes) (bool, string, error) {
	return true, "", nil
}

// KubernetesOptions tunes Kubernetes.
type KubernetesOptions struct {
	// Audiences the token must be valid for; empty: the API server's.
	Audiences []string
	// CacheTTL is how long a review's answer is reused; CacheSize bounds
	// how many answers are kept. Errors are never cached.
	CacheTTL  time.Duration
	CacheSize int
	// TokenReviewQPS and TokenReviewBurst bound the TokenReviews of tokens
	// the cache does not know; PerSource the share of one client address.
	// Zero takes the defaults above. A request beyond them is refused with
	// ErrReviewBudget at once, never queued.
	TokenReviewQPS, TokenReviewPerSourceQPS     float64
	TokenReviewBurst, TokenReviewPerSourceBurst int
	// Clock drives the cache. Default: the real clock.
	Clock clock.PassiveClock
}

// Kubernetes authenticates bearer tokens with a TokenReview and
// authorizes calls with a SubjectAccessReview on crawl.proxyfleet.io
// proxies/leases, caching both answers briefly. The operator's own
// credentials need create on tokenreviews and subjectaccessreviews (the
// system:auth-delegator ClusterRole).
//
// Like the API server's own cached token authenticator it caches answers
// (rejections too) under a hash of the token and shares one review among
// concurrent requests with the same token; like kube-rbac-proxy and the
// API server's delegated authentication it should get a client of its own
// (its own QPS), so that reviews never spend the controller's budget. New
// tokens are further bounded by a budget of their own (see the defaults).
type Kubernetes struct {
	client    kubernetes.Interface
	audiences []string
	ttl       time.Duration
	tokens    *utilcache.LRUExpireCache // sha256(token) → tokenAnswer
	decisions *utilcache.LRUExpireCache // sha256(user, attrs) → decision
	inflight  singleflight.Group

	// reviews is the overall budget for new tokens; sources holds each
	// client address's share (address → *rate.Limiter).
	reviews            *rate.Limiter
	sources            *utilcache.LRUExpireCache
	sourceQPS          rate.Limit
	sourceBurst        int
	reviewsRefused     atomic.Int64
	implausibleRefused atomic.Int64
}

type tokenAnswer struct {
	user          User
	authenticated bool
}

type decision struct {
	allowed bool
	reason  string
}

// NewKubernetes returns the authenticator and authorizer of
// --lease-auth=kubernetes.
func NewKubernetes(client kubernetes.Interface, opts KubernetesOptions) *Kubernetes {
	if opts.CacheTTL == 0 {
		opts.CacheTTL = DefaultCacheTTL
	}
	if opts.CacheSize == 0 {
		opts.CacheSize = DefaultCacheSize
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	orDefault := func(v *float64, def float64) {
		if *v == 0 {
			*v = def
		}
	}
	orDefault(&opts.TokenReviewQPS, DefaultTokenReviewQPS)
	orDefault(&opts.TokenReviewPerSourceQPS, DefaultTokenReviewPerSourceQPS)
	if opts.TokenReviewBurst == 0 {
		opts.TokenReviewBurst = DefaultTokenReviewBurst
	}
	if opts.TokenReviewPerSourceBurst == 0 {
		opts.TokenReviewPerSourceBurst = DefaultTokenReviewPerSourceBurst
	}
	return &Kubernetes{
		client:      client,
		audiences:   slices.Clone(opts.Audiences),
		ttl:         opts.CacheTTL,
		tokens:      utilcache.NewLRUExpireCacheWithClock(opts.CacheSize, opts.Clock),
		decisions:   utilcache.NewLRUExpireCacheWithClock(opts.CacheSize, opts.Clock),
		reviews:     rate.NewLimiter(rate.Limit(opts.TokenReviewQPS), opts.TokenReviewBurst),
		sources:     utilcache.NewLRUExpireCacheWithClock(tokenSources, opts.Clock),
		sourceQPS:   rate.Limit(opts.TokenReviewPerSourceQPS),
		sourceBurst: opts.TokenReviewPerSourceBurst,
	}
}

// Refused counts the bearer tokens refused without a TokenReview: over the
// review budget, and not plausibly a token at all.
func (a *Kubernetes) Refused() (overBudget, implausible int64) {
	return a.reviewsRefused.Load(), a.implausibleRefused.Load()
}

// spendReview takes one review from the caller's share and the overall
// budget, without waiting.
func (a *Kubernetes) spendReview(ctx context.Context) bool {
	addr := clientAddr(ctx)
	var source *rate.Limiter
	if v, ok := a.sources.Get(addr); ok {
		source = v.(*rate.Limiter)
	} else {
		source = rate.NewLimiter(a.sourceQPS, a.sourceBurst)
		// A share unused for a minute is full again: forgetting it is free.
		a.sources.Add(addr, source, time.Minute)
	}
	if !source.Allow() {
		return false
	}
	return a.reviews.Allow()
}

// Authenticate reviews token with the API server.
func (a *Kubernetes) Authenticate(ctx context.Context, token string) (User, error) {
	if token == "" {
		return User{}, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	if !plausibleToken(token) {
		a.implausibleRefused.Add(1)
		return User{}, fmt.Errorf("%w: that is not a bearer token", ErrUnauthenticated)
	}
	// The cache keys on a hash: raw tokens are not kept around.
	key := sha256.Sum256([]byte(token))
	if v, ok := a.tokens.Get(key); ok {
		return v.(tokenAnswer).result()
	}
	// Concurrent requests with one new token share one review (and one
	// unit of budget).
	v, err, _ := a.inflight.Do(string(key[:]), func() (any, error) {
		if v, ok := a.tokens.Get(key); ok {
			return v.(tokenAnswer), nil
		}
		if !a.spendReview(ctx) {
			a.reviewsRefused.Add(1)
			return nil, ErrReviewBudget
		}
		return a.review(context.WithoutCancel(ctx), key, token)
	})
	if err != nil {
		return User{}, err
	}
	return v.(tokenAnswer).result()
}

// review asks the API server about a token and caches the answer.
func (a *Kubernetes) review(ctx context.Context, key [sha256.Size]byte, token string) (tokenAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	review, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return tokenAnswer{}, fmt.Errorf("TokenReview: %w", err)
	}
	answer := tokenAnswer{authenticated: review.Status.Authenticated}
	if answer.authenticated {
		u := review.Status.User
		answer.user = User{Name: u.Username, UID: u.UID, Groups: u.Groups}
		if len(u.Extra) > 0 {
			answer.user.Extra = make(map[string][]string, len(u.Extra))
			for k, v := range u.Extra {
				answer.user.Extra[k] = slices.Clone(v)
			}
		}
	}
	a.tokens.Add(key, answer, a.ttl)
	return answer, nil
}

func (t tokenAnswer) result() (User, error) {
	if !t.authenticated {
		return User{}, fmt.Errorf("%w: the token was rejected", ErrUnauthenticated)
	}
	return t.user, nil
}

// Authorize asks the API server whether user may attrs.Verb proxies/leases
// in attrs.Namespace.
func (a *Kubernetes) Authorize(ctx context.Context, user User, attrs Attributes) (bool, string, error) {
	key := decisionKey(user, attrs)
	if v, ok := a.decisions.Get(key); ok {
		d := v.(decision)
		return d.allowed, d.reason, nil
	}
	spec := authorizationv1.SubjectAccessReviewSpec{
		User:               user.Name,
		UID:                user.UID,
		Groups:             user.Groups,
		ResourceAttributes: resourceAttributes(attrs),
	}
	if len(user.Extra) > 0 {
		spec.Extra = make(map[string]authorizationv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			spec.Extra[k] = v
		}
	}
	review, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("SubjectAccessReview: %w", err)
	}
	d := decision{allowed: review.Status.Allowed && !review.Status.Denied, reason: review.Status.Reason}
	a.decisions.Add(key, d, a.ttl)
	return d.allowed, d.reason, nil
}

// resourceAttributes is what a SubjectAccessReview asks about attrs:
// act-for on ActForResource in ActForGroup across the cluster (the
// namespace is ignored: acting for users is never namespaced), every other
// verb on crawl.proxyfleet.io proxies/leases in attrs.Namespace.
func resourceAttributes(attrs Attributes) *authorizationv1.ResourceAttributes {
	if attrs.Verb == VerbActFor {
		return &authorizationv1.ResourceAttributes{Verb: VerbActFor, Group: ActForGroup, Resource: ActForResource}
	}
	return &authorizationv1.ResourceAttributes{
		Namespace:   attrs.Namespace,
		Verb:        attrs.Verb,
		Group:       crawlv1alpha1.SchemeGroupVersion.Group,
		Version:     crawlv1alpha1.SchemeGroupVersion.Version,
		Resource:    authResource,
		Subresource: authSubresource,
	}
}

// decisionKey hashes everything a SubjectAccessReview depends on. Every
// field is length-prefixed and every list counted, so that no two different
// inputs share a key.
func decisionKey(u User, attrs Attributes) [sha256.Size]byte {
	var b strings.Builder
	field := func(s string) { fmt.Fprintf(&b, "%d:%s;", len(s), s) }
	count := func(n int) { fmt.Fprintf(&b, "#%d;", n) }
	field(u.Name)
	field(u.UID)
	count(len(u.Groups))
	for _, g := range slices.Sorted(slices.Values(u.Groups)) {
		field(g)
	}
	count(len(u.Extra))
	for _, k := range slices.Sorted(maps.Keys(u.Extra)) {
		field(k)
		count(len(u.Extra[k]))
		for _, v := range u.Extra[k] {
			field(v)
		}
	}
	field(attrs.Verb)
	field(attrs.Namespace)
	return sha256.Sum256([]byte(b.String()))
}
