package lease

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

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
)

// The resource every lease call is authorized on.
const (
	authResource    = "proxies"
	authSubresource = "leases"
)

// Defaults of KubernetesAuthOptions.
const (
	DefaultAuthCacheTTL  = 10 * time.Second
	DefaultAuthCacheSize = 4096
)

// ErrUnauthenticated: no bearer token, or one the authenticator rejects (401).
var ErrUnauthenticated = errors.New("unauthenticated")

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

// NoAuth lets everyone do everything (--lease-auth=none): local development only.
type NoAuth struct{}

// NewNoAuth returns NoAuth and says loudly that the lease API is open.
func NewNoAuth(logger klog.Logger) NoAuth {
	logger.Info("WARNING: the lease API runs WITHOUT authentication or authorization (--lease-auth=none): " +
		"anyone who can reach it can lease every proxy and read its credentials. Use it for local development only.")
	return NoAuth{}
}

func (NoAuth) Authenticate(context.Context, string) (User, error) {
	return User{Name: "system:anonymous"}, nil
}

func (NoAuth) Authorize(context.Context, User, Attributes) (bool, string, error) {
	return true, "", nil
}

// KubernetesAuthOptions tunes KubernetesAuth.
type KubernetesAuthOptions struct {
	// Audiences the token must be valid for; empty: the API server's.
	Audiences []string
	// CacheTTL is how long a review's answer is reused; CacheSize bounds
	// how many answers are kept. Errors are never cached.
	CacheTTL  time.Duration
	CacheSize int
	// Clock drives the cache. Default: the real clock.
	Clock clock.PassiveClock
}

// KubernetesAuth authenticates bearer tokens with a TokenReview and
// authorizes calls with a SubjectAccessReview on crawl.proxyfleet.io
// proxies/leases, caching both answers briefly. The operator's own
// credentials need create on tokenreviews and subjectaccessreviews (the
// system:auth-delegator ClusterRole).
type KubernetesAuth struct {
	client    kubernetes.Interface
	audiences []string
	ttl       time.Duration
	tokens    *utilcache.LRUExpireCache // sha256(token) → tokenAnswer
	decisions *utilcache.LRUExpireCache // sha256(user, attrs) → decision
}

type tokenAnswer struct {
	user          User
	authenticated bool
}

type decision struct {
	allowed bool
	reason  string
}

// NewKubernetesAuth returns the authenticator and authorizer of
// --lease-auth=kubernetes.
func NewKubernetesAuth(client kubernetes.Interface, opts KubernetesAuthOptions) *KubernetesAuth {
	if opts.CacheTTL == 0 {
		opts.CacheTTL = DefaultAuthCacheTTL
	}
	if opts.CacheSize == 0 {
		opts.CacheSize = DefaultAuthCacheSize
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &KubernetesAuth{
		client:    client,
		audiences: slices.Clone(opts.Audiences),
		ttl:       opts.CacheTTL,
		tokens:    utilcache.NewLRUExpireCacheWithClock(opts.CacheSize, opts.Clock),
		decisions: utilcache.NewLRUExpireCacheWithClock(opts.CacheSize, opts.Clock),
	}
}

// Authenticate reviews token with the API server.
func (a *KubernetesAuth) Authenticate(ctx context.Context, token string) (User, error) {
	if token == "" {
		return User{}, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	// The cache keys on a hash: raw tokens are not kept around.
	key := sha256.Sum256([]byte(token))
	if v, ok := a.tokens.Get(key); ok {
		return v.(tokenAnswer).result()
	}
	review, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return User{}, fmt.Errorf("TokenReview: %w", err)
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
	return answer.result()
}

func (t tokenAnswer) result() (User, error) {
	if !t.authenticated {
		return User{}, fmt.Errorf("%w: the token was rejected", ErrUnauthenticated)
	}
	return t.user, nil
}

// Authorize asks the API server whether user may attrs.Verb proxies/leases
// in attrs.Namespace.
func (a *KubernetesAuth) Authorize(ctx context.Context, user User, attrs Attributes) (bool, string, error) {
	key := decisionKey(user, attrs)
	if v, ok := a.decisions.Get(key); ok {
		d := v.(decision)
		return d.allowed, d.reason, nil
	}
	spec := authorizationv1.SubjectAccessReviewSpec{
		User:   user.Name,
		UID:    user.UID,
		Groups: user.Groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace:   attrs.Namespace,
			Verb:        attrs.Verb,
			Group:       crawlv1alpha1.SchemeGroupVersion.Group,
			Version:     crawlv1alpha1.SchemeGroupVersion.Version,
			Resource:    authResource,
			Subresource: authSubresource,
		},
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
