// Package ec2test is an in-process fake of the part of Amazon EC2 that
// pkg/provider/aws uses, served by net/http/httptest on 127.0.0.1 and
// spoken to by the real aws-sdk-go-v2 client (its BaseEndpoint): the EC2
// Query protocol (form-encoded POSTs, Action and Version), XML answers as
// the EC2 API reference documents them, and EC2's error bodies.
//
// It keeps state like EC2 where the provider can tell: RunInstances'
// client tokens (the same token returns the same instance, a changed
// request IdempotentParameterMismatch), instances that go pending → running
// and shutting-down → terminated after the describes that show them
// (WithSteps), terminated instances listed on, and EC2's eventual consistency (a
// new instance unknown for its first WithInvisibleCalls describes and
// terminates). Requests are validated (unknown AMI, SSM parameter, instance
// type, subnet or security group; unknown filters) and authorized by an IAM
// policy when one is set (iam.go). Tests inject faults through the
// embedded faultkit.Kit (FailNext, SetRandomFaults), lose or hold the
// answers of calls that took effect (LoseNextAnswers: EC2 acted and
// answers InternalError; HoldAnswers), take capacity away (SetNoCapacity,
// SetUnsupported) and change instances behind the provider's back
// (SetState). WithBoot runs something for each instance with a public IP,
// such as faultkit.BootForwardProxy.
//
// Public addresses are 127.0.100.x, so nothing ever reaches past loopback.
// It is not a simulation of EC2: there are no VPCs, volumes or prices.
package ec2test

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
)

// Defaults of a new Server.
var (
	// Regions and their availability zones.
	DefaultZones = map[string][]string{"eu-west-1": {"eu-west-1a", "eu-west-1b"}, "us-east-1": {"us-east-1a"}}
	// Subnets, each in a zone.
	DefaultSubnets = map[string]string{
		"subnet-0a0a0a0a0a0a0a0a0": "eu-west-1a",
		"subnet-0b0b0b0b0b0b0b0b0": "eu-west-1b",
		"subnet-0c0c0c0c0c0c0c0c0": "us-east-1a",
	}
	DefaultSecurityGroups = []string{"sg-0123456789abcdef0"}
	DefaultInstanceTypes  = []string{"t3.micro", "t3a.micro", "t3.small", "c7i.large"}
	DefaultImages         = []string{"ami-0123456789abcdef0"}
	// DefaultSSMParameters: SSM parameter → the AMI it names.
	DefaultSSMParameters = map[string]string{"/aws/service/debian/release/12/latest/amd64": "ami-0123456789abcdef0"}
)

// Test credentials: the SDK signs with them; the fake checks the key ID.
const (
	AccessKeyID     = "AKIAEC2TESTFAKE00001"
	SecretAccessKey = "ec2test-secret-not-a-real-key"
	AccountID       = "123456789012"
)

// Action names an EC2 API action.
type Action string

// The actions the fake serves.
const (
	RunInstances       Action = "RunInstances"
	DescribeInstances  Action = "DescribeInstances"
	TerminateInstances Action = "TerminateInstances"
	// DescribeSpotInstanceRequests shows a Spot instance's request, where
	// an interruption notice appears (Interrupt).
	DescribeSpotInstanceRequests Action = "DescribeSpotInstanceRequests"
	// The security group actions of spec.aws.allowFrom (groups.go).
	DescribeSubnets               Action = "DescribeSubnets"
	DescribeVpcs                  Action = "DescribeVpcs"
	DescribeSecurityGroups        Action = "DescribeSecurityGroups"
	CreateSecurityGroup           Action = "CreateSecurityGroup"
	AuthorizeSecurityGroupIngress Action = "AuthorizeSecurityGroupIngress"
	DeleteSecurityGroup           Action = "DeleteSecurityGroup"
)

// Error is an EC2 error answer.
type Error struct {
	Status  int    `xml:"-"`
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

// Common errors, as EC2 answers them.
var (
	ErrRequestLimitExceeded  = Error{Status: 503, Code: "RequestLimitExceeded", Message: "Request limit exceeded."}
	ErrInternal              = Error{Status: 500, Code: "InternalError", Message: "An internal error has occurred."}
	ErrInstanceLimitExceeded = Error{Status: 400, Code: "InstanceLimitExceeded", Message: "You have requested more instances than your current instance limit allows."}
	// ErrInsufficientCapacity is a launch EC2 has no capacity for.
	ErrInsufficientCapacity = Error{Status: 500, Code: "InsufficientInstanceCapacity", Message: "We currently do not have sufficient capacity in the Availability Zone you requested."}
)

// Server is the fake, its faults those of the embedded kit, which serves
// it at URL (the SDK's BaseEndpoint). Its methods are safe for concurrent
// use.
type Server struct {
	*faultkit.Kit[Action, Error]
	mu        sync.Mutex
	opts      options
	instances map[string]*instance // by ID
	order     []string             // IDs in launch order
	tokens    map[string]string    // region/client token → instance ID
	unsupp    map[string]bool      // instance type
	nextID    int
	groups    map[string]*group // created security groups, by ID
	// caller is the policy of the call being handled (handle holds mu
	// throughout a call); nil allows everything.
	caller *Policy
}

type options struct {
	invisibleCalls int
	steps          int
	policy         *Policy
	// principals are the access keys besides AccessKeyID, each with its
	// own policy (nil: allowed everything).
	principals map[string]*Policy
	pageSize   int
	publicIP   func(n int) string
	boot       faultkit.BootFunc
}

// Option configures a Server.
type Option func(*options)

// WithInvisibleCalls hides a new instance from its first n describes and
// terminates (EC2's eventual consistency). Default 0.
func WithInvisibleCalls(n int) Option { return func(o *options) { o.invisibleCalls = n } }

// WithSteps sets how many describes show an instance pending (or
// shutting-down, or stopping) before it moves on. Default 1: the first
// describe after the launch shows it pending, the next running.
func WithSteps(n int) Option { return func(o *options) { o.steps = n } }

// WithPolicy authorizes every request of AccessKeyID by an IAM policy
// (iam.go).
func WithPolicy(p *Policy) Option { return func(o *options) { o.policy = p } }

// WithPrincipal adds an identity of the same account: requests signed
// with accessKeyID (any secret) are authorized by p, as a second cluster's
// operator sharing the account would be by its own role's policy.
func WithPrincipal(accessKeyID string, p *Policy) Option {
	return func(o *options) {
		if o.principals == nil {
			o.principals = map[string]*Policy{}
		}
		o.principals[accessKeyID] = p
	}
}

// WithPublicIP chooses the public IP of the n-th instance launched (from
// 1). Default 127.0.100.n: tests that need a proxy there run one.
func WithPublicIP(ip func(n int) string) Option { return func(o *options) { o.publicIP = ip } }

// WithBoot runs boot when an instance with a public IP is launched, and
// the halt it returns when the instance shuts down, stops or is
// terminated: a test runs there what the instance would
// (faultkit.BootForwardProxy, or its own reading faultkit.UserDataEnv).
func WithBoot(boot faultkit.BootFunc) Option { return func(o *options) { o.boot = boot } }

// WithPageSize caps DescribeInstances' page (and its MaxResults). Default 1000.
func WithPageSize(n int) Option { return func(o *options) { o.pageSize = n } }

// instance is one instance's state.
type instance struct {
	id, region, zone, subnet, token, reservation string
	request                                      string // canonical request, for IdempotentParameterMismatch
	imageID, instanceType, userData              string
	securityGroups                               []string
	spot                                         bool
	spotStatus                                   string // the Spot request's status code
	httpTokens                                   string
	hopLimit                                     int32
	tags                                         map[string]string
	state                                        string
	reason                                       string
	launched                                     time.Time
	privateIP, publicIP                          string
	ipv6Addresses, ipv6Prefixes                  []string
	faultkit.Lag                                 // calls it is unknown to yet
	stepsLeft                                    int
}

// New starts a Server; it is closed when the test ends.
func New(t testing.TB, opts ...Option) *Server {
	o := options{steps: 1, pageSize: 1000, publicIP: func(n int) string { return fmt.Sprintf("127.0.100.%d", (n-1)%254+1) }}
	for _, opt := range opts {
		opt(&o)
	}
	s := &Server{
		opts: o, instances: map[string]*instance{}, tokens: map[string]string{},
		unsupp: map[string]bool{}, groups: map[string]*group{},
	}
	s.Kit = faultkit.New(t, http.HandlerFunc(s.serve), faultkit.Cloud[Action, Error]{
		Write: write, RateLimited: ErrRequestLimitExceeded, Random: randomFaults, Lost: &ErrInternal, Boot: o.boot,
	})
	return s
}

// outOfCapacity: the test took the capacity of key (an instance type or
// a subnet) away (SetNoCapacity).
func (s *Server) outOfCapacity(key string) bool {
	_, none := s.NoCapacity(key)
	return none
}

// SetUnsupported makes launches of an instance type fail with Unsupported.
func (s *Server) SetUnsupported(instanceType string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unsupp[instanceType] = on
}

// Instance is a test's view of one instance.
type Instance struct {
	ID, Region, Zone, Subnet, ClientToken  string
	ImageID, InstanceType, UserData, State string
	SecurityGroups                         []string
	Spot                                   bool
	HTTPTokens                             string
	Tags                                   map[string]string
	PublicIP                               string
	// Ipv6Prefixes are the /80s delegated to its interface
	// (Ipv6PrefixCount), as its metadata service would show them.
	Ipv6Prefixes []string
}

// Instances are every instance ever launched, terminated ones included, in
// launch order.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Instance, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, s.instances[id].view())
	}
	return out
}

// view is the test's copy of in.
func (in *instance) view() Instance {
	tags := map[string]string{}
	for k, v := range in.tags {
		tags[k] = v
	}
	return Instance{
		ID: in.id, Region: in.region, Zone: in.zone, Subnet: in.subnet, ClientToken: in.token,
		ImageID: in.imageID, InstanceType: in.instanceType, UserData: in.userData, State: in.state,
		SecurityGroups: append([]string(nil), in.securityGroups...), Spot: in.spot, HTTPTokens: in.httpTokens,
		Tags: tags, PublicIP: in.publicIP, Ipv6Prefixes: slices.Clone(in.ipv6Prefixes),
	}
}

// haltIfDown ends what WithBoot runs for in once in is no longer up.
func (s *Server) haltIfDown(in *instance) {
	if in.state != "pending" && in.state != "running" {
		go s.Halt(in.id) // a server's shutdown may wait; s.mu is held
	}
}

// Live are the instances not terminated.
func (s *Server) Live() []Instance {
	var out []Instance
	for _, in := range s.Instances() {
		if in.State != "terminated" {
			out = append(out, in)
		}
	}
	return out
}

// SetState moves an instance to state (pending, running, stopping, stopped,
// shutting-down, terminated) behind the provider's back, with reason as its
// state reason (a spot interruption: "Server.SpotInstanceTermination").
func (s *Server) SetState(id, state, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[id]
	if !ok {
		return fmt.Errorf("ec2test: no instance %s", id)
	}
	in.state, in.reason, in.stepsLeft = state, reason, s.opts.steps
	in.Hide(0)
	s.haltIfDown(in)
	return nil
}

// Interrupt gives a Spot instance an interruption notice: its request's
// status becomes marked-for-termination; the instance runs on until the
// test ends it (SetState).
func (s *Server) Interrupt(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[id]
	if !ok || !in.spot {
		return fmt.Errorf("ec2test: no Spot instance %s", id)
	}
	in.spotStatus = "marked-for-termination"
	return nil
}

// SetTag sets a tag of an instance behind the provider's back.
func (s *Server) SetTag(id, key, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[id]
	if !ok {
		return fmt.Errorf("ec2test: no instance %s", id)
	}
	in.tags[key] = value
	return nil
}

// SDKEnv is the environment that points an aws-sdk-go-v2 program (the
// operator binary) at the fake with its test credentials, with the
// metadata service and the user's AWS files out of the way: a test's
// program reaches loopback only.
func (s *Server) SDKEnv() []string {
	return []string{
		"AWS_ENDPOINT_URL_EC2=" + s.URL,
		"AWS_ACCESS_KEY_ID=" + AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + SecretAccessKey,
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
	}
}
