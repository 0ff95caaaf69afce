// Package gatewaycmd is `proxy-operator gateway`: one replica of the gateway
// tier, a forward proxy for crawlers that leases its upstreams from the
// lease API over HTTP (pkg/gateway's Remote) and holds no state of its own,
// so that any number of replicas sit behind one Service and a leader change
// cuts no tunnel (docs/gateway.md, docs/decisions/0188-gateway-tier.md).
package gatewaycmd

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// Lease API authentication, as the operator's --lease-auth.
const (
	AuthKubernetes = "kubernetes"
	AuthNone       = "none"
)

// Defaults of the flags.
const (
	DefaultListen      = ":3128"
	DefaultMetricsAddr = ":9090"
	// DefaultLeaseURL is the chart's leases Service in the gateway's own
	// namespace.
	DefaultLeaseURL = "http://proxy-operator-leases:8080"
	// DefaultShutdownGrace lets open tunnels finish after SIGTERM; with the
	// drain delay it stays inside the chart's 40 s termination grace.
	DefaultShutdownGrace = 25 * time.Second
	// DefaultDrainDelay is how long readiness is false before the listener
	// closes, so that the Service stops sending first.
	DefaultDrainDelay = 5 * time.Second
	// serviceAccountToken is the in-cluster token, the default --lease-token-file.
	serviceAccountToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"
)

// Options are the flags of `proxy-operator gateway`.
type Options struct {
	// Listen is where crawlers connect.
	Listen string
	// MetricsAddr serves /metrics, /healthz and /readyz.
	MetricsAddr string
	// LeaseURLs are the lease API's URLs, tried in order from the leader's.
	LeaseURLs []string
	// LeaseTokenFile is the gateway's own bearer token for the lease API;
	// empty: the in-cluster ServiceAccount token when there is one.
	LeaseTokenFile string
	// Kubeconfig is for the callers' TokenReviews and SubjectAccessReviews;
	// empty: $KUBECONFIG, else in-cluster.
	Kubeconfig string
	// LeaseAuth checks callers: AuthKubernetes or AuthNone.
	LeaseAuth string
	// Wait, SessionIdle and LeaseTTL are the gateway's (--gateway-*).
	Wait, SessionIdle, LeaseTTL time.Duration
	// LeaderWait holds new connections while no leader answers.
	LeaderWait time.Duration
	// DrainDelay and ShutdownGrace order a SIGTERM: readiness false for
	// DrainDelay, then no new connections and ShutdownGrace for open
	// tunnels, then the rotating leases are released.
	DrainDelay, ShutdownGrace time.Duration
	// Profiling serves /debug/pprof/ on MetricsAddr.
	Profiling bool
	// WatchCrawlPolicies: judge each domain by its CrawlPolicy rule's
	// banDetection (an informer over every namespace's CrawlPolicies);
	// false: every domain by the default, 401, 403 and 429.
	WatchCrawlPolicies bool
	// InspectionPorts are the CONNECT ports inspected; empty: 443.
	InspectionPorts []string
	// InspectionCANamespace is where the operator keeps the inspected
	// namespaces' CA Secrets; empty: nothing is inspected.
	InspectionCANamespace string
	// InspectionTargetRoots is a PEM file of certificates trusted for
	// inspected targets besides the system's.
	InspectionTargetRoots string

	leaseURLSet bool
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options {
	return Options{
		Listen:             DefaultListen,
		MetricsAddr:        DefaultMetricsAddr,
		LeaseURLs:          []string{DefaultLeaseURL},
		LeaseAuth:          AuthKubernetes,
		SessionIdle:        gateway.DefaultSessionIdle,
		LeaderWait:         gateway.DefaultLeaderWait,
		DrainDelay:         DefaultDrainDelay,
		ShutdownGrace:      DefaultShutdownGrace,
		WatchCrawlPolicies: true,
	}
}

// AddFlags binds the options to fs; the gateway flags keep the operator's names.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Listen, "listen", o.Listen, "Address crawlers connect to (host:port).")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", o.MetricsAddr, "Address of /metrics, /healthz and /readyz (ready while a lease API leader answers and not draining).")
	fs.Func("lease-url", fmt.Sprintf("URL of the lease API; repeat or separate with commas to list several (a standby's NotLeader sends calls to the next). Default %s.", DefaultLeaseURL), func(v string) error {
		if !o.leaseURLSet { // the first --lease-url replaces the default
			o.LeaseURLs, o.leaseURLSet = nil, true
		}
		for _, u := range strings.Split(v, ",") {
			if u = strings.TrimSpace(u); u != "" {
				o.LeaseURLs = append(o.LeaseURLs, u)
			}
		}
		return nil
	})
	fs.StringVar(&o.LeaseTokenFile, "lease-token-file", o.LeaseTokenFile, "File holding the gateway's own bearer token for the lease API (re-read at each call). Empty: the in-cluster ServiceAccount token when there is one, else none.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig for the callers' TokenReviews and SubjectAccessReviews. Empty: $KUBECONFIG, else the in-cluster config.")
	fs.StringVar(&o.LeaseAuth, "lease-auth", o.LeaseAuth, `How callers are checked: "kubernetes" (TokenReview + SubjectAccessReview, as the lease API) or "none" (local development only).`)
	fs.DurationVar(&o.Wait, "gateway-wait", o.Wait, "How long a connection waits for a free proxy before it is answered 503 (at most the lease API's longest wait, 60s).")
	fs.DurationVar(&o.SessionIdle, "gateway-session-idle", o.SessionIdle, "How long a session keeps renewing its lease without a connection on this replica.")
	fs.DurationVar(&o.LeaseTTL, "gateway-lease-ttl", o.LeaseTTL, "TTL of the gateway's leases, renewed at half; 0: the lease API's default. An idle session's lease lapses within it.")
	fs.DurationVar(&o.LeaderWait, "leader-wait", o.LeaderWait, "How long a new connection is held while no lease API URL answers as the leader (a failover).")
	fs.DurationVar(&o.DrainDelay, "drain-delay", o.DrainDelay, "After SIGTERM: how long readiness is false before the listener closes.")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Serve Go's profiles (/debug/pprof/) beside /metrics on --metrics-addr. Off by default: the address is often reachable by more than the operator's admins.")
	fs.DurationVar(&o.ShutdownGrace, "shutdown-grace", o.ShutdownGrace, "After the listener closes: how long open tunnels may finish before they are cut.")
	fs.BoolVar(&o.WatchCrawlPolicies, "watch-crawl-policies", o.WatchCrawlPolicies, "Judge each response by the banDetection of its domain's CrawlPolicy rule (needs list and watch on crawlpolicies, through --kubeconfig). False: every domain by the default, 401, 403 and 429.")
	fs.StringVar(&o.InspectionCANamespace, "inspection-ca-namespace", o.InspectionCANamespace, "Namespace where the operator keeps the CAs of the namespaces that opted into TLS inspection (the operator's own; docs/inspection.md). Empty: nothing is inspected.")
	fs.Func("inspection-ports", "CONNECT ports whose TLS is inspected in opted-in namespaces, comma-separated (default 443); other ports are tunnelled.", func(v string) error {
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return fmt.Errorf("%q is not a port (1-65535)", p)
			}
			o.InspectionPorts = append(o.InspectionPorts, p)
		}
		return nil
	})
	fs.StringVar(&o.InspectionTargetRoots, "inspection-target-roots", o.InspectionTargetRoots, "PEM file of certificates trusted, besides the system's, to verify inspected targets.")
}

// Validate checks every flag and names each bad one.
func (o Options) Validate() error {
	var errs []error
	bad := func(flagName, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flagName, fmt.Sprintf(format, args...)))
	}
	type named[T any] struct {
		flag  string
		value T
	}
	for _, a := range []named[string]{{"listen", o.Listen}, {"metrics-addr", o.MetricsAddr}} {
		if _, port, err := net.SplitHostPort(a.value); err != nil {
			bad(a.flag, "%q is not host:port: %v", a.value, err)
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			bad(a.flag, "port %q is not a number from 0 to 65535", port)
		}
	}
	if o.Listen == o.MetricsAddr {
		bad("metrics-addr", "must differ from --listen (both are %q)", o.Listen)
	}
	if len(o.LeaseURLs) == 0 {
		bad("lease-url", "at least one URL is required")
	}
	for _, raw := range o.LeaseURLs {
		if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("lease-url", "%q is not http(s)://host[:port]", raw)
		}
	}
	if o.LeaseAuth != AuthKubernetes && o.LeaseAuth != AuthNone {
		bad("lease-auth", "must be %q or %q, got %q", AuthKubernetes, AuthNone, o.LeaseAuth)
	}
	if o.Wait < 0 || o.Wait > store.DefaultMaxWait {
		bad("gateway-wait", "must be between 0s and %v, got %v", store.DefaultMaxWait, o.Wait)
	}
	for _, d := range []named[time.Duration]{{"gateway-session-idle", o.SessionIdle}, {"leader-wait", o.LeaderWait}, {"shutdown-grace", o.ShutdownGrace}} {
		if d.value <= 0 {
			bad(d.flag, "must be positive, got %v", d.value)
		}
	}
	for _, d := range []named[time.Duration]{{"gateway-lease-ttl", o.LeaseTTL}, {"drain-delay", o.DrainDelay}} {
		if d.value < 0 {
			bad(d.flag, "must not be negative, got %v", d.value)
		}
	}
	return errors.Join(errs...)
}
