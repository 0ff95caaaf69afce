// Package aws is the EC2 provider: each Managed proxy instance is an EC2
// instance with a public IPv4 address (its egress IP), configured by
// cloud-init from a user-data that joins the Proxy's cloud-init and a part
// of the operator's (launch.go), built from spec.aws with the operator's
// region as the default. It speaks to EC2 only through the official SDK
// (aws-sdk-go-v2): its credential chain, request signing, retryer and error
// decoding (docs/decisions/0192-aws-provider-on-the-sdk.md).
//
// Instance IDs are "region/i-…". Create is idempotent across a crash through
// RunInstances' client token (launch.go); Get and Delete allow for EC2's
// eventual consistency (a new instance may be unknown to DescribeInstances
// for a while); ListByTag finds instances by tag in every region this
// Provider has used, scoped to its cluster ID.
package aws

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// Defaults of Options.
const (
	DefaultMaxAttempts = 5
	// DefaultThrottleBackoff is the first delay after RequestLimitExceeded;
	// it doubles per attempt up to MaxThrottleBackoff. EC2 throttles per
	// account, so backing off longer than for other errors helps every
	// other caller in the account too.
	DefaultThrottleBackoff = time.Second
	// DefaultMaxBackoff caps every delay between attempts (the SDK's default).
	DefaultMaxBackoff = 20 * time.Second
)

// visibilityWindow is how long a launched instance may stay unknown to
// DescribeInstances before its absence means it is gone.
const visibilityWindow = 5 * time.Minute

// maxTokenAttempts bounds the client tokens one create walks through past
// terminated instances of the same spec (launch.go, clientToken).
const maxTokenAttempts = 50

// Options configures a Provider.
type Options struct {
	// Region is used when spec.aws.region is empty (--aws-region).
	Region string
	// ClusterID tags every instance (TagClusterID) and scopes ListByTag.
	// Required.
	ClusterID string
	// Credentials, when set, replace the SDK's default chain (environment,
	// shared config, web identity / IRSA, instance role). Secret.
	Credentials awssdk.CredentialsProvider
	// BaseEndpoint, when set, is where every EC2 request goes (tests).
	BaseEndpoint string
	// HTTPClient, when set, sends the SDK's requests.
	HTTPClient *http.Client
	// MaxAttempts is the SDK retryer's attempts per call. Default DefaultMaxAttempts.
	MaxAttempts int
	// ThrottleBackoff is the first delay after throttling. Default
	// DefaultThrottleBackoff.
	ThrottleBackoff time.Duration
	// MaxBackoff caps every delay between attempts. Default DefaultMaxBackoff.
	MaxBackoff time.Duration
	// Clock ages launched instances. Default the real clock.
	Clock clock.PassiveClock
	// Secrets reads the credentials Secret of a Proxy (written into the
	// instance's user-data). Nil fails the create of every Proxy that has
	// credentials, which is every Managed Proxy.
	Secrets provider.SecretReader
}

// Provider runs proxy instances as EC2 instances. It is safe for concurrent use.
type Provider struct {
	cfg          awssdk.Config
	region       string
	clusterID    string
	baseEndpoint string
	clock        clock.PassiveClock
	secrets      provider.SecretReader

	mu      sync.Mutex
	clients map[string]*ec2.Client // by region
	// launched: instance ID → when RunInstances returned it, until Get sees
	// it (EC2's eventual consistency).
	launched map[string]time.Time
	// attempts: client-token prefix → the attempt that last launched, so a
	// create after a replacement skips the spent tokens.
	attempts map[string]int
	// groups: region/VPC/name → ID of the security groups ownedGroup made
	// or found, so a launch does not ask EC2 again.
	groups map[string]string
}

var _ provider.Provider = (*Provider)(nil)

// New returns a Provider. It makes no API call: the default credential
// chain is resolved at the first request, as the SDK does.
func New(ctx context.Context, opts Options) (*Provider, error) {
	if opts.ClusterID == "" {
		return nil, errors.New("aws provider: a cluster ID is required")
	}
	loadOpts := []func(*config.LoadOptions) error{
		config.WithRegion(opts.Region),
		config.WithRetryer(newRetryer(opts.MaxAttempts, opts.ThrottleBackoff, opts.MaxBackoff)),
	}
	if opts.Credentials != nil {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(opts.Credentials))
	}
	if opts.HTTPClient != nil {
		loadOpts = append(loadOpts, config.WithHTTPClient(opts.HTTPClient))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("aws provider: loading the SDK's configuration: %w", err)
	}
	p := &Provider{
		cfg: cfg, region: opts.Region, clusterID: opts.ClusterID, baseEndpoint: opts.BaseEndpoint,
		clock: opts.Clock, secrets: opts.Secrets,
		clients: map[string]*ec2.Client{}, launched: map[string]time.Time{}, attempts: map[string]int{}, groups: map[string]string{},
	}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	return p, nil
}

// newRetryer is the SDK's standard retryer with the operator's backoff on
// throttling and no client-side retry quota: the controller's workqueue
// already bounds how often a Proxy is retried.
func newRetryer(maxAttempts int, throttleBackoff, maxBackoff time.Duration) func() awssdk.Retryer {
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttempts
	}
	if throttleBackoff <= 0 {
		throttleBackoff = DefaultThrottleBackoff
	}
	if maxBackoff <= 0 {
		maxBackoff = DefaultMaxBackoff
	}
	return func() awssdk.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = maxAttempts
			o.MaxBackoff = maxBackoff
			o.RateLimiter = ratelimit.None
			o.Backoff = backoff{throttle: throttleBackoff, max: maxBackoff, other: retry.NewExponentialJitterBackoff(maxBackoff)}
			// EC2 answers a capacity error with a 500; another place, not a
			// retry of this one, is what helps (Create).
			o.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(func(err error) awssdk.Ternary {
				if isCapacityError(err) {
					return awssdk.FalseTernary
				}
				return awssdk.UnknownTernary
			})}, o.Retryables...)
		})
	}
}

// backoff doubles from throttle per attempt after a throttling error, up
// to max (with jitter over the upper half), and leaves other errors to the
// SDK's.
type backoff struct {
	throttle, max time.Duration
	other         retry.BackoffDelayer
}

func (b backoff) BackoffDelay(attempt int, err error) (time.Duration, error) {
	if code := errorCode(err); code != "RequestLimitExceeded" && code != "Throttling" {
		return b.other.BackoffDelay(attempt, err)
	}
	d := b.throttle << min(max(attempt-1, 0), 10)
	d = min(d, b.max)
	return d/2 + rand.N(d/2+1), nil
}

// client is the EC2 client of a region.
func (p *Provider) client(region string) *ec2.Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[region]; ok {
		return c
	}
	c := ec2.NewFromConfig(p.cfg, func(o *ec2.Options) {
		o.Region = region
		if p.baseEndpoint != "" {
			o.BaseEndpoint = awssdk.String(p.baseEndpoint)
		}
	})
	p.clients[region] = c
	return c
}

// regionOf is spec.aws.region, or the operator's.
func (p *Provider) regionOf(proxy *crawlv1alpha1.Proxy) (string, error) {
	if s := proxy.Spec.AWS; s != nil && s.Region != "" {
		return s.Region, nil
	}
	if p.region == "" {
		return "", errors.New("no region: set spec.aws.region or the operator's --aws-region")
	}
	return p.region, nil
}

// Create launches the instance at the first place (instance type, subnet)
// with capacity, and returns once EC2 accepted it.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	if req.Proxy == nil || req.Name == "" {
		return provider.Instance{}, provider.Permanent(errors.New("aws provider: a create request needs a name and a Proxy"))
	}
	region, err := p.regionOf(req.Proxy)
	if err != nil {
		return provider.Instance{}, provider.Permanent(fmt.Errorf("aws provider: %w", err))
	}
	creds, err := provider.ReadCredentials(ctx, "aws", req.Proxy, p.secrets)
	if err != nil {
		return provider.Instance{}, err
	}
	ud, err := userData(req, creds)
	if err != nil {
		return provider.Instance{}, provider.Permanent(fmt.Errorf("aws provider: %w", err))
	}
	var capacityErrs []error
	for _, at := range launchOrder(awsSpec(req.Proxy), string(req.Proxy.UID)) {
		// A new place is a new client token: adopt what an earlier attempt
		// launched rather than launch a second instance (adopt.go).
		if inst, ok, err := p.adoptLaunched(ctx, region, req); err != nil || ok {
			return inst, err
		}
		groups, err := p.groupsAt(ctx, region, req.Proxy, at)
		if err != nil {
			return provider.Instance{}, fmt.Errorf("the security group of %s (%s) in region %s: %w", req.Name, placeName(at), region, classify(err))
		}
		inst, err := p.launch(ctx, region, req, ud, at, groups)
		if err == nil {
			return inst, nil
		}
		if !isCapacityError(err) {
			return provider.Instance{}, fmt.Errorf("launching %s (%s) in region %s: %w", req.Name, placeName(at), region, classify(err))
		}
		klog.FromContext(ctx).V(2).Info("No capacity; trying the next place", "instance", req.Name, "place", placeName(at), "code", errorCode(err))
		capacityErrs = append(capacityErrs, fmt.Errorf("%s: %s", placeName(at), errorCode(err)))
	}
	err = fmt.Errorf("launching %s in region %s: no place had capacity (%w)", req.Name, region, errors.Join(capacityErrs...))
	if allUnsupported(capacityErrs) {
		return provider.Instance{}, provider.Permanent(err)
	}
	return provider.Instance{}, provider.Quota(err)
}

// groupsAt are the security groups of an instance at one place: the
// user's, or the one the operator owns for spec.aws.allowFrom in the
// place's VPC.
func (p *Provider) groupsAt(ctx context.Context, region string, proxy *crawlv1alpha1.Proxy, at launchSpec) ([]string, error) {
	spec := awsSpec(proxy)
	if len(spec.AllowFrom) == 0 {
		return spec.SecurityGroupIDs, nil
	}
	id, err := p.ownedGroup(ctx, region, proxy, at.subnet)
	if err != nil {
		return nil, err
	}
	return []string{id}, nil
}

func placeName(at launchSpec) string {
	if at.subnet == "" {
		return at.instanceType
	}
	return at.instanceType + " in " + at.subnet
}

func allUnsupported(errs []error) bool {
	return !slices.ContainsFunc(errs, func(err error) bool { return !strings.HasSuffix(err.Error(), ": Unsupported") })
}

// launch runs the instance at one place, walking past client tokens whose
// instance is already terminated.
func (p *Provider) launch(ctx context.Context, region string, req provider.CreateRequest, ud string, at launchSpec, groups []string) (provider.Instance, error) {
	key := clientToken(req.Name, req.SpecHash, at, 0)
	for attempt := p.firstAttempt(key); attempt < maxTokenAttempts; attempt++ {
		input := runInput(req, p.clusterID, ud, at, attempt)
		input.NetworkInterfaces[0].Groups = groups
		out, err := p.client(region).RunInstances(ctx, input)
		if err != nil {
			return provider.Instance{}, err
		}
		if len(out.Instances) != 1 {
			return provider.Instance{}, fmt.Errorf("RunInstances returned %d instances, not 1", len(out.Instances))
		}
		in := out.Instances[0]
		if in.State != nil && (in.State.Name == types.InstanceStateNameTerminated || in.State.Name == types.InstanceStateNameShuttingDown) {
			// This token's instance was replaced: the next token, unless
			// another attempt already launched one (adopt.go).
			if inst, ok, err := p.adoptLaunched(ctx, region, req); err != nil || ok {
				return inst, err
			}
			continue
		}
		inst, _ := toInstance(region, in)
		p.remember(key, attempt, inst.ID)
		klog.FromContext(ctx).V(2).Info("Instance launched", "instance", inst.ID, "place", placeName(at), "attempt", attempt)
		return inst, nil
	}
	return provider.Instance{}, fmt.Errorf("every one of %d client tokens for %s has a terminated instance", maxTokenAttempts, req.Name)
}

func (p *Provider) firstAttempt(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempts[key]
}

func (p *Provider) remember(key string, attempt int, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	for k, t := range p.launched {
		if now.Sub(t) > visibilityWindow {
			delete(p.launched, k)
		}
	}
	p.attempts[key] = attempt
	p.launched[id] = now
}

// recentlyLaunched: EC2 may not know id yet.
func (p *Provider) recentlyLaunched(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.launched[id]
	return ok && p.clock.Now().Sub(t) <= visibilityWindow
}

func (p *Provider) seen(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.launched, id)
}

// Get observes the instance with this ID.
func (p *Provider) Get(ctx context.Context, id string) (provider.Instance, error) {
	region, ec2ID, ok := strings.Cut(id, "/")
	if !ok || !strings.HasPrefix(ec2ID, "i-") {
		return provider.Instance{}, fmt.Errorf("instance %q is not region/i-…: %w", id, provider.ErrNotFound)
	}
	out, err := p.client(region).DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{ec2ID}})
	var found []types.Instance
	if err == nil {
		for _, r := range out.Reservations {
			found = append(found, r.Instances...)
		}
	}
	switch {
	case err != nil && !isNotFound(err):
		return provider.Instance{}, fmt.Errorf("describing instance %s: %w", id, classify(err))
	case len(found) == 0 && p.recentlyLaunched(id):
		return provider.Instance{ID: id, State: provider.StateProvisioning, Message: "launched, not yet visible to DescribeInstances"}, nil
	case len(found) == 0:
		return provider.Instance{}, fmt.Errorf("instance %s: %w", id, provider.ErrNotFound)
	}
	p.seen(id)
	if cluster := clusterOf(found[0]); cluster != p.clusterID {
		// Another cluster's instance does not exist for this one: handed
		// its ID, the controller makes its own rather than adopt it.
		return provider.Instance{}, fmt.Errorf("instance %s belongs to cluster %q, not %q: %w", id, cluster, p.clusterID, provider.ErrNotFound)
	}
	inst, ok := toInstance(region, found[0])
	if !ok {
		return provider.Instance{}, fmt.Errorf("instance %s is terminated: %w", id, provider.ErrNotFound)
	}
	request := awssdk.ToString(found[0].SpotInstanceRequestId)
	inst.Interruptible = request != ""
	if request != "" && inst.State == provider.StateRunning {
		if inst.Interruption, err = p.spotInterruption(ctx, region, request); err != nil {
			return provider.Instance{}, fmt.Errorf("reading Spot request %s of instance %s: %w", request, id, classify(err))
		}
	}
	return inst, nil
}

// interruptionCodes are the Spot request status codes of an interruption
// notice: EC2 takes the instance about two minutes later.
var interruptionCodes = map[string]bool{"marked-for-termination": true, "marked-for-stop": true, "marked-for-hibernation": true}

// spotInterruption is the interruption notice on a Spot request, "" for none.
func (p *Provider) spotInterruption(ctx context.Context, region, request string) (string, error) {
	out, err := p.client(region).DescribeSpotInstanceRequests(ctx, &ec2.DescribeSpotInstanceRequestsInput{SpotInstanceRequestIds: []string{request}})
	if errorCode(err) == "InvalidSpotInstanceRequestID.NotFound" {
		return "", nil // not visible yet
	}
	if err != nil {
		return "", err
	}
	for _, r := range out.SpotInstanceRequests {
		if r.Status != nil && interruptionCodes[awssdk.ToString(r.Status.Code)] {
			return "Spot interruption notice (" + awssdk.ToString(r.Status.Code) + ")", nil
		}
	}
	return "", nil
}

// Delete terminates the instance, if it is this cluster's. One that is
// gone is fine; one that EC2 does not know yet is retried, or it would run
// on unowned. Another cluster's instance is never terminated (nor seen by
// Get): the documented IAM policy refuses it too (docs/aws.md).
func (p *Provider) Delete(ctx context.Context, id string) error {
	region, ec2ID, ok := strings.Cut(id, "/")
	if !ok || !strings.HasPrefix(ec2ID, "i-") {
		return nil
	}
	out, err := p.client(region).DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{ec2ID}})
	var found []types.Instance
	if err == nil {
		for _, r := range out.Reservations {
			found = append(found, r.Instances...)
		}
	}
	switch {
	case err != nil && !isNotFound(err):
		return fmt.Errorf("describing instance %s before terminating it: %w", id, classify(err))
	case len(found) == 0 && p.recentlyLaunched(id):
		return provider.Transient(fmt.Errorf("terminating instance %s: EC2 does not know it yet; retrying", id))
	case len(found) == 0:
		return nil
	case clusterOf(found[0]) != p.clusterID:
		klog.FromContext(ctx).Info("Not terminating an instance of another cluster", "instance", id, "cluster", clusterOf(found[0]))
		return nil
	}
	_, err = p.client(region).TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{ec2ID}})
	switch {
	case isNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("terminating instance %s: %w", id, classify(err))
	}
	klog.FromContext(ctx).V(2).Info("Instance terminate accepted", "instance", id)
	return nil
}

// ListByTag lists the cluster's live instances carrying the tag, in the
// default region and every region this Provider has launched or seen in.
func (p *Provider) ListByTag(ctx context.Context, key, value string) ([]provider.Instance, error) {
	filters := []types.Filter{
		{Name: awssdk.String("tag:" + key), Values: []string{value}},
		{Name: awssdk.String("tag:" + TagClusterID), Values: []string{p.clusterID}},
		{Name: awssdk.String("instance-state-name"), Values: []string{"pending", "running", "shutting-down", "stopping", "stopped"}},
	}
	var out []provider.Instance
	for _, region := range p.regions() {
		pages := ec2.NewDescribeInstancesPaginator(p.client(region), &ec2.DescribeInstancesInput{Filters: filters})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				return nil, fmt.Errorf("listing instances of region %s with tag %s=%s: %w", region, key, value, classify(err))
			}
			for _, r := range page.Reservations {
				for _, in := range r.Instances {
					if inst, ok := toInstance(region, in); ok {
						out = append(out, inst)
					}
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// regions are the default region and every region with a client.
func (p *Provider) regions() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	set := map[string]string{}
	if p.region != "" {
		set[p.region] = p.region
	}
	for r := range p.clients {
		set[r] = r
	}
	return sortedKeys(set)
}
