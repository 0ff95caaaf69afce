package operator

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/leaderelection"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/dashboard"
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// Lease API authentication modes (--lease-auth).
const (
	// LeaseAuthKubernetes checks bearer tokens with a TokenReview and calls
	// with a SubjectAccessReview.
	LeaseAuthKubernetes = "kubernetes"
	// LeaseAuthNone lets anyone in: local development only.
	LeaseAuthNone = "none"
)

// serviceAccountNamespaceFile holds the Pod's namespace when it runs in a cluster.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Options are the operator's flags (docs/operations.md), beside klog's.
type Options struct {
	// Kubeconfig is the kubeconfig file; empty: $KUBECONFIG, else in-cluster.
	Kubeconfig string
	// Namespace restricts the operator to one namespace; empty: all.
	Namespace string
	// Workers is how many Proxies the controller syncs at once.
	Workers int
	// KubeAPIQPS and KubeAPIBurst bound the operator's API requests (leader
	// election has its own budget, so a busy controller cannot starve lease
	// renewals).
	KubeAPIQPS   float32
	KubeAPIBurst int

	// LeaderElect runs leader election so that one replica reconciles; off
	// for a single replica outside a Deployment (make run).
	LeaderElect bool
	// LeaderElectNamespace holds the Lease lock.
	LeaderElectNamespace string
	// LeaderElectLeaseDuration is how long a standby waits after the last
	// renewal before it takes over; RenewDeadline is how long the leader
	// keeps retrying a renewal before it gives up leading (and exits);
	// RetryPeriod is the interval between attempts.
	LeaderElectLeaseDuration time.Duration
	LeaderElectRenewDeadline time.Duration
	LeaderElectRetryPeriod   time.Duration

	// LeaseAddr is where the lease API (docs/api.md) listens, on every
	// replica; only the leader answers /v1 calls.
	LeaseAddr string
	// LeaseAuth is LeaseAuthKubernetes or LeaseAuthNone.
	LeaseAuth string
	// LeaseDefaultTTL applies when an acquire names no ttl; LeaseMinTTL and
	// LeaseMaxTTL bound what a call may ask for. LeaseMaxTTL also bounds how
	// long a new leader may have to refuse grants after a crash.
	LeaseDefaultTTL, LeaseMinTTL, LeaseMaxTTL time.Duration

	// The lease API under abuse (issues 19, 20). LeaseAuthQPS and
	// LeaseAuthBurst are the API budget of its TokenReviews and
	// SubjectAccessReviews, a client of their own, so that authentication
	// never spends the controller's. LeaseMaxPerIdentity caps the live
	// leases one authenticated identity holds (0: no cap). LeaseMaxSessions
	// and LeaseMaxCooldowns bound the sticky sessions and cool-down entries
	// the leader keeps.
	LeaseAuthQPS                                             float32
	LeaseAuthBurst                                           int
	LeaseMaxPerIdentity, LeaseMaxSessions, LeaseMaxCooldowns int
	// LeaseMaxDomainBudgets bounds the crawl policies' per-domain budgets
	// of default rules.
	LeaseMaxDomainBudgets int
	// LeaseMaxStateBytes, LeaseMaxStateEntries and
	// LeaseMaxStateBytesPerIdentity bound the session state the leader
	// keeps: in all (each entry charged its blob, key and overhead), in
	// entries, and for one identity.
	LeaseMaxStateBytes, LeaseMaxStateEntries, LeaseMaxStateBytesPerIdentity int
	// LeaseSiteBanProxies distinct proxies of a namespace banned by one
	// site within LeaseSiteBanWindow stop its grants there until the
	// window passes (docs/decisions/0413-a-site-bans-a-bounded-number-of-proxies.md).
	LeaseSiteBanProxies int
	LeaseSiteBanWindow  time.Duration

	// MetricsAddr serves /metrics, /healthz and /readyz on every replica.
	MetricsAddr string
	// DashboardHistoryInterval is how often the dashboard samples each pool
	// for its charts, which keep dashboard.DefaultHistoryLength samples.
	DashboardHistoryInterval time.Duration

	// HealthWorkers bounds the health probes running at once.
	HealthWorkers int
	// HealthMaxProbesPerEndpoint bounds the probes running at once through
	// one proxy address (host:port), which many Proxies may share.
	HealthMaxProbesPerEndpoint int
	// HealthLatencyUpdatesPerSecond bounds the status writes that only
	// record a new probe latency, fleet-wide (verdicts are never held back).
	// 0 means LatencyShareOfQPS of KubeAPIQPS.
	HealthLatencyUpdatesPerSecond float64
	// Providers are the enabled providers (spec.provider values), among
	// the registered ones.
	Providers []string
	// registered are the providers these options were made for
	// (NewOptions), each with its settings: their flags are bound by
	// AddFlags, checked by Validate and used by Run to build the enabled
	// ones.
	registered []registeredProvider
	// GeoIPDatabase is a MaxMind DB file mapping exit IPs to countries
	// (status.exitCountry, docs/geography.md); "" for none.
	GeoIPDatabase string
	// GCInterval is how often orphaned provider instances are collected.
	GCInterval time.Duration

	// PodName and PodNamespace name the operator's own Pod (from the
	// downward API), which the leader labels for the lease Service; empty
	// outside a Pod.
	PodName      string
	PodNamespace string

	// Replication is the lease store's across the replicas (replication.go).
	Replication ReplicationOptions

	// Profiling serves /debug/pprof/ on MetricsAddr (profiling.go).
	Profiling bool

	// InspectionCANamespace, when set, makes the leader keep a CA for every
	// namespace that opted into TLS inspection, its key in a Secret here
	// (the operator's own namespace; pkg/inspectionca). Empty: none.
	InspectionCANamespace string
}

// LatencyShareOfQPS is the part of --kube-api-qps that latency-only status
// writes may take when --health-latency-updates-per-second is 0 (5 per
// second at the default 100).
const LatencyShareOfQPS = 0.05

// latencyUpdatesPerSecond is the health engine's budget for latency-only
// reports: the flag, or its share of the API budget.
func (o *Options) latencyUpdatesPerSecond() float64 {
	if o.HealthLatencyUpdatesPerSecond > 0 {
		return o.HealthLatencyUpdatesPerSecond
	}
	return float64(o.KubeAPIQPS) * LatencyShareOfQPS
}

// DefaultOptions returns the defaults of every flag, with the providers
// compiled in (BuiltinProviders).
func DefaultOptions() Options { return NewOptions(BuiltinProviders()) }

// NewOptions returns the defaults of every flag, with registry's providers
// and theirs. A registry whose providers collide (provider.Registry.Check)
// is a programming error: it panics, as a flag defined twice does.
func NewOptions(registry provider.Registry) Options {
	if err := registry.Check(); err != nil {
		panic("operator: the provider registry: " + err.Error())
	}
	registered := make([]registeredProvider, 0, len(registry))
	for _, reg := range registry {
		registered = append(registered, registeredProvider{Registration: reg, settings: reg.NewSettings()})
	}
	return Options{
		Workers: 3,
		// A 1,000-proxy fleet after a restart or failover syncs every Proxy
		// once (a status write each, plus events): at client-go's default of
		// 5 QPS that is minutes of stale status; at 100 it is ~10 s. The burst
		// absorbs a spec change across a labelled group without queueing.
		// Steady state is near zero: status is written only on change.
		KubeAPIQPS:               100,
		KubeAPIBurst:             200,
		LeaderElect:              true,
		LeaderElectNamespace:     inClusterNamespace(serviceAccountNamespaceFile),
		LeaderElectLeaseDuration: 15 * time.Second,
		LeaderElectRenewDeadline: 10 * time.Second,
		LeaderElectRetryPeriod:   2 * time.Second,
		LeaseAddr:                ":8080",
		LeaseAuth:                LeaseAuthKubernetes,
		LeaseDefaultTTL:          store.DefaultTTL,
		LeaseMinTTL:              store.DefaultMinTTL,
		LeaseMaxTTL:              store.DefaultMaxTTL,
		LeaseAuthQPS:             50,
		LeaseAuthBurst:           100,
		LeaseMaxSessions:         store.DefaultMaxSessions,
		LeaseMaxCooldowns:        store.DefaultMaxCooldowns,
		LeaseMaxDomainBudgets:    store.DefaultMaxDomainBudgets,
		LeaseMaxStateBytes:       store.DefaultMaxStateBytes,
		LeaseMaxStateEntries:     store.DefaultMaxStateEntries,
		LeaseSiteBanProxies:      store.DefaultSiteBanProxies,
		LeaseSiteBanWindow:       store.DefaultSiteBanWindow,
		MetricsAddr:              ":9090",
		DashboardHistoryInterval: dashboard.DefaultHistoryInterval,
		// Sized in pkg/health (Little's law with room for probes that run
		// into their timeout); benchmarked at 10,000 proxies.
		HealthWorkers:              health.DefaultWorkers,
		HealthMaxProbesPerEndpoint: health.DefaultMaxProbesPerEndpoint,
		// One identity keeps at most a quarter of the session state.
		LeaseMaxStateBytesPerIdentity: store.DefaultMaxStateBytesPerOwner,
		// In a cluster, Pods; local, gce and aws are opt-in. A Managed Proxy
		// naming a provider that is not enabled goes Failed.
		Providers:    []string{string(crawlv1alpha1.ProviderKubernetes)},
		registered:   registered,
		GCInterval:   10 * time.Minute,
		PodName:      os.Getenv("POD_NAME"),
		PodNamespace: os.Getenv("POD_NAMESPACE"),
		Replication:  defaultReplicationOptions(),
	}
}

// inClusterNamespace is the namespace the Pod runs in, or "default" outside
// a cluster.
func inClusterNamespace(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "default"
	}
	if ns := strings.TrimSpace(string(data)); ns != "" {
		return ns
	}
	return "default"
}

// AddFlags binds o to fs, with o's current values as the defaults; start
// from DefaultOptions.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig file. Empty: $KUBECONFIG, else the in-cluster config.")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Only reconcile Proxies (and read Secrets) in this namespace. Empty: all namespaces.")
	fs.IntVar(&o.Workers, "workers", o.Workers, "How many Proxies are reconciled at once.")
	fs.Var((*float32Value)(&o.KubeAPIQPS), "kube-api-qps", "Steady rate of requests to the Kubernetes API, per second.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Requests to the Kubernetes API allowed above --kube-api-qps in a burst.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader through a Lease so that one replica reconciles; the others stand by.")
	fs.StringVar(&o.LeaderElectNamespace, "leader-elect-namespace", o.LeaderElectNamespace, fmt.Sprintf("Namespace of the %q Lease. Default: the Pod's own namespace in a cluster, else \"default\".", LeaseName))
	fs.DurationVar(&o.LeaderElectLeaseDuration, "leader-elect-lease-duration", o.LeaderElectLeaseDuration, "How long a standby waits after the leader's last renewal before taking over.")
	fs.DurationVar(&o.LeaderElectRenewDeadline, "leader-elect-renew-deadline", o.LeaderElectRenewDeadline, "How long the leader retries renewing before it stops leading (and exits). Less than the lease duration.")
	fs.DurationVar(&o.LeaderElectRetryPeriod, "leader-elect-retry-period", o.LeaderElectRetryPeriod, "Interval between attempts to acquire or renew the lease.")
	fs.StringVar(&o.LeaseAddr, "lease-addr", o.LeaseAddr, "Address of the lease API (docs/api.md): served on every replica, answered by the leader; standbys answer 503 NotLeader.")
	fs.StringVar(&o.LeaseAuth, "lease-auth", o.LeaseAuth, `Authentication of the lease API: "kubernetes" (TokenReview + SubjectAccessReview) or "none" (local development only).`)
	fs.DurationVar(&o.LeaseDefaultTTL, "lease-default-ttl", o.LeaseDefaultTTL, "Lease TTL when an acquire names none.")
	fs.DurationVar(&o.DashboardHistoryInterval, "dashboard-history-interval", o.DashboardHistoryInterval, "How often the dashboard samples each pool for its charts, which show the last 120 samples.")
	fs.DurationVar(&o.LeaseMinTTL, "lease-min-ttl", o.LeaseMinTTL, "The shortest TTL an acquire or renew may ask for.")
	fs.DurationVar(&o.LeaseMaxTTL, "lease-max-ttl", o.LeaseMaxTTL, "The longest TTL an acquire or renew may ask for; also bounds how long a new leader refuses grants after a crash.")
	fs.Var((*float32Value)(&o.LeaseAuthQPS), "lease-auth-qps", "API requests per second of the lease API's TokenReviews and SubjectAccessReviews, a budget apart from --kube-api-qps.")
	fs.IntVar(&o.LeaseAuthBurst, "lease-auth-burst", o.LeaseAuthBurst, "Burst of --lease-auth-qps.")
	fs.IntVar(&o.LeaseMaxPerIdentity, "lease-max-per-identity", o.LeaseMaxPerIdentity, "Most live leases one authenticated identity (user and UID) may hold; an acquire beyond it is a 429 TooManyLeases. 0: no cap.")
	fs.IntVar(&o.LeaseMaxSessions, "lease-max-sessions", o.LeaseMaxSessions, "Most sticky sessions the lease API remembers; beyond it the least recently used is forgotten.")
	fs.IntVar(&o.LeaseMaxCooldowns, "lease-max-cooldowns", o.LeaseMaxCooldowns, "Most (proxy, domain) cool-down entries the lease API keeps; beyond it the one whose end or expiry is nearest goes.")
	fs.IntVar(&o.LeaseMaxStateBytes, "lease-max-state-bytes", o.LeaseMaxStateBytes, "Most bytes of session state (PUT .../state, up to 64 KiB per identity, proxy and domain) the lease API keeps, each entry counted with its key and a fixed overhead; beyond it the least recently used go.")
	fs.IntVar(&o.LeaseMaxStateEntries, "lease-max-state-entries", o.LeaseMaxStateEntries, "Most session state entries the lease API keeps; beyond it the least recently used go.")
	fs.IntVar(&o.LeaseMaxStateBytesPerIdentity, "lease-max-state-bytes-per-identity", o.LeaseMaxStateBytesPerIdentity, "Most bytes of session state (counted as for --lease-max-state-bytes) one identity keeps; beyond it its own least recently used go.")
	fs.IntVar(&o.LeaseMaxDomainBudgets, "lease-max-domain-budgets", o.LeaseMaxDomainBudgets, "Most per-domain budgets of CrawlPolicy default rules the lease API keeps, shared equally by the namespaces with a default rule; idle ones go to make room, and a new domain finding its namespace's share all in use is a 429 DomainLimited.")
	fs.IntVar(&o.LeaseSiteBanProxies, "lease-site-ban-proxies", o.LeaseSiteBanProxies, fmt.Sprintf("How many distinct proxies of a namespace one site (a registrable domain) may ban within --lease-site-ban-window; then an acquire for it there is a 429 SiteBanning until the oldest of those bans leaves the window (a tiered rule moves to its next tier first). 1 to %d.", store.MaxSiteBanProxies))
	fs.DurationVar(&o.LeaseSiteBanWindow, "lease-site-ban-window", o.LeaseSiteBanWindow, "How far back the bans of --lease-site-ban-proxies count.")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", o.MetricsAddr, "Address serving /metrics, /healthz and /readyz, on every replica.")
	fs.IntVar(&o.HealthWorkers, "health-workers", o.HealthWorkers, "How many health probes run at once.")
	fs.IntVar(&o.HealthMaxProbesPerEndpoint, "health-max-probes-per-endpoint", o.HealthMaxProbesPerEndpoint,
		"How many health probes run at once through one proxy address (host:port); the others wait their turn, and the wait never counts against the proxy. Many Proxies share one address behind a proxy network's super proxy.")
	fs.Float64Var(&o.HealthLatencyUpdatesPerSecond, "health-latency-updates-per-second", o.HealthLatencyUpdatesPerSecond,
		fmt.Sprintf("Fleet-wide budget of status writes that only record a new probe latency (status.latencyMillis); verdicts are never held back. Part of --kube-api-qps, so below it. 0: %v%% of --kube-api-qps.", LatencyShareOfQPS*100))
	fs.Var((*listValue)(&o.Providers), "providers", fmt.Sprintf("Comma-separated providers to enable (%s). A Managed Proxy naming another fails.", strings.Join(o.Registry().Names(), ", ")))
	for _, r := range o.registered {
		r.settings.AddFlags(fs)
	}
	fs.StringVar(&o.GeoIPDatabase, "geoip-database", o.GeoIPDatabase, "A GeoIP database file in MaxMind DB format (GeoLite2-Country, say) that maps each proxy's measured exit IP to status.exitCountry when the health check's answer names no country. The operator fails to start when it does not open.")
	fs.DurationVar(&o.GCInterval, "gc-interval", o.GCInterval, "How often provider instances whose Proxy is gone are collected.")
	fs.StringVar(&o.PodName, "pod-name", o.PodName, "The operator's own Pod (default $POD_NAME); the leader labels it "+LeaderLabel+"=true for the lease Service.")
	fs.StringVar(&o.PodNamespace, "pod-namespace", o.PodNamespace, "The namespace of the operator's own Pod (default $POD_NAMESPACE).")
	o.Replication.AddFlags(fs)
	fs.StringVar(&o.InspectionCANamespace, "inspection-ca-namespace", o.InspectionCANamespace, "Namespace where the CAs of the namespaces that opted into TLS inspection are kept (the operator's own; docs/inspection.md); the gateway reads them from there. Empty: no CA is issued and nothing is inspected.")
	o.addProfilingFlags(fs)
}

// float32Value is a flag.Value for rest.Config's float32 QPS.
type float32Value float32

func (v *float32Value) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 32) }

func (v *float32Value) Set(s string) error {
	f, err := strconv.ParseFloat(s, 32)
	if err != nil {
		return err
	}
	*v = float32Value(f)
	return nil
}

// listValue is a comma-separated flag; blanks are dropped, so "" is empty.
type listValue []string

func (v *listValue) String() string { return strings.Join(*v, ",") }

func (v *listValue) Set(s string) error {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	*v = out
	return nil
}

// Validate checks every option on its own and against the others; each error
// names its flag.
func (o *Options) Validate() error {
	var errs []error
	bad := func(flagName, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flagName, fmt.Sprintf(format, args...)))
	}
	o.validateAPIClient(bad)
	o.validateLeaderElection(bad)
	o.validateListeners(bad)
	o.validateLeases(bad)
	o.validateHealth(bad)
	o.validateProviders(bad)
	errs = append(errs, o.Replication.validate(o.PodNamespace)...)
	errs = append(errs, o.validateProviderSettings()...)
	return errors.Join(errs...)
}

// badFlag records that a flag's value is refused, and why.
type badFlag = func(flagName, format string, args ...any)

// validateAPIClient checks the watched namespace, the workers and the API client's budget.
func (o *Options) validateAPIClient(bad badFlag) {
	if o.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(o.Namespace) {
			bad("namespace", "%q is not a namespace name: %s", o.Namespace, msg)
		}
	}
	if o.Workers < 1 {
		bad("workers", "must be at least 1, got %d", o.Workers)
	}
	if !(o.KubeAPIQPS > 0) { // also rejects NaN
		bad("kube-api-qps", "must be positive, got %v", o.KubeAPIQPS)
	}
	if o.KubeAPIBurst < 1 {
		bad("kube-api-burst", "must be at least 1, got %d", o.KubeAPIBurst)
	} else if o.KubeAPIQPS > 0 && float32(o.KubeAPIBurst) < o.KubeAPIQPS {
		bad("kube-api-burst", "must be at least --kube-api-qps (%v), got %d", o.KubeAPIQPS, o.KubeAPIBurst)
	}
}

// validateLeaderElection checks the election's namespace and the timing rules
// client-go's leader elector enforces, stated with our flag names.
func (o *Options) validateLeaderElection(bad badFlag) {
	if !o.LeaderElect {
		return
	}
	if o.LeaderElectNamespace == "" {
		bad("leader-elect-namespace", "must be set when --leader-elect is true")
	} else {
		for _, msg := range validation.IsDNS1123Label(o.LeaderElectNamespace) {
			bad("leader-elect-namespace", "%q is not a namespace name: %s", o.LeaderElectNamespace, msg)
		}
	}
	// The rules client-go's leader elector enforces, stated with our flag names.
	switch {
	case o.LeaderElectRetryPeriod <= 0:
		bad("leader-elect-retry-period", "must be positive, got %v", o.LeaderElectRetryPeriod)
	case o.LeaderElectRenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(o.LeaderElectRetryPeriod)):
		bad("leader-elect-renew-deadline", "must be greater than %v × --leader-elect-retry-period (%v), got %v",
			leaderelection.JitterFactor, o.LeaderElectRetryPeriod, o.LeaderElectRenewDeadline)
	case o.LeaderElectLeaseDuration <= o.LeaderElectRenewDeadline:
		bad("leader-elect-lease-duration", "must be greater than --leader-elect-renew-deadline (%v), got %v",
			o.LeaderElectRenewDeadline, o.LeaderElectLeaseDuration)
	}
}

// validateListeners checks the servers' addresses and the lease API's auth mode.
func (o *Options) validateListeners(bad badFlag) {
	metricsOK := checkAddr("metrics-addr", o.MetricsAddr, bad)
	leaseOK := checkAddr("lease-addr", o.LeaseAddr, bad)
	if metricsOK && leaseOK && sameListenAddr(o.MetricsAddr, o.LeaseAddr) {
		bad("lease-addr", "must differ from --metrics-addr (both are %q)", o.LeaseAddr)
	}
	switch o.LeaseAuth {
	case LeaseAuthKubernetes, LeaseAuthNone:
	default:
		bad("lease-auth", "must be %q or %q, got %q", LeaseAuthKubernetes, LeaseAuthNone, o.LeaseAuth)
	}
}

// validateLeases checks the lease TTLs, the auth client's budget and the caps.
func (o *Options) validateLeases(bad badFlag) {
	switch {
	case o.LeaseMinTTL <= 0:
		bad("lease-min-ttl", "must be positive, got %v", o.LeaseMinTTL)
	case o.LeaseMaxTTL < o.LeaseMinTTL:
		bad("lease-max-ttl", "must be at least --lease-min-ttl (%v), got %v", o.LeaseMinTTL, o.LeaseMaxTTL)
	case o.LeaseDefaultTTL < o.LeaseMinTTL || o.LeaseDefaultTTL > o.LeaseMaxTTL:
		bad("lease-default-ttl", "must be within --lease-min-ttl and --lease-max-ttl (%v..%v), got %v", o.LeaseMinTTL, o.LeaseMaxTTL, o.LeaseDefaultTTL)
	}
	if o.DashboardHistoryInterval < time.Second {
		bad("dashboard-history-interval", "must be at least 1s, got %v", o.DashboardHistoryInterval)
	}
	if !(o.LeaseAuthQPS > 0) {
		bad("lease-auth-qps", "must be positive, got %v", o.LeaseAuthQPS)
	}
	if o.LeaseAuthBurst < 1 {
		bad("lease-auth-burst", "must be at least 1, got %d", o.LeaseAuthBurst)
	}
	if o.LeaseMaxPerIdentity < 0 {
		bad("lease-max-per-identity", "must not be negative (0: no cap), got %d", o.LeaseMaxPerIdentity)
	}
	if o.LeaseMaxSessions < 1 {
		bad("lease-max-sessions", "must be at least 1, got %d", o.LeaseMaxSessions)
	}
	if o.LeaseMaxStateBytes < store.MaxStateSize {
		bad("lease-max-state-bytes", "must be at least %d (one state), got %d", store.MaxStateSize, o.LeaseMaxStateBytes)
	}
	if o.LeaseMaxStateEntries < 1 {
		bad("lease-max-state-entries", "must be at least 1, got %d", o.LeaseMaxStateEntries)
	}
	if o.LeaseMaxStateBytesPerIdentity < store.MaxStateSize {
		bad("lease-max-state-bytes-per-identity", "must be at least %d (one state), got %d", store.MaxStateSize, o.LeaseMaxStateBytesPerIdentity)
	}
	if o.LeaseMaxDomainBudgets < 1 {
		bad("lease-max-domain-budgets", "must be at least 1, got %d", o.LeaseMaxDomainBudgets)
	}
	if o.LeaseMaxCooldowns < 1 {
		bad("lease-max-cooldowns", "must be at least 1, got %d", o.LeaseMaxCooldowns)
	}
	if o.LeaseSiteBanProxies < 1 || o.LeaseSiteBanProxies > store.MaxSiteBanProxies {
		bad("lease-site-ban-proxies", "must be between 1 and %d, got %d", store.MaxSiteBanProxies, o.LeaseSiteBanProxies)
	}
	if o.LeaseSiteBanWindow < time.Second {
		bad("lease-site-ban-window", "must be at least 1s, got %v", o.LeaseSiteBanWindow)
	}
}

// validateHealth checks the health engine's workers and its latency write budget.
func (o *Options) validateHealth(bad badFlag) {
	if o.HealthMaxProbesPerEndpoint < 1 {
		bad("health-max-probes-per-endpoint", "must be at least 1, got %d", o.HealthMaxProbesPerEndpoint)
	}
	if o.HealthWorkers < 1 {
		bad("health-workers", "must be at least 1, got %d", o.HealthWorkers)
	}
	if !(o.HealthLatencyUpdatesPerSecond >= 0) { // also rejects NaN
		bad("health-latency-updates-per-second", "must not be negative, got %v", o.HealthLatencyUpdatesPerSecond)
	} else if o.KubeAPIQPS > 0 && o.HealthLatencyUpdatesPerSecond >= float64(o.KubeAPIQPS) {
		bad("health-latency-updates-per-second", "must be below --kube-api-qps (%v), or latency updates would crowd out every other write; got %v",
			o.KubeAPIQPS, o.HealthLatencyUpdatesPerSecond)
	}
}

// validateProviders checks the provider list and the orphan collection's
// interval.
func (o *Options) validateProviders(bad badFlag) {
	known := o.Registry().Names()
	seen := map[string]bool{}
	for _, name := range o.Providers {
		switch {
		case !slices.Contains(known, name):
			bad("providers", "unknown provider %q (known: %s)", name, strings.Join(known, ", "))
		case seen[name]:
			bad("providers", "provider %q is listed twice", name)
		}
		seen[name] = true
	}
	if o.GCInterval <= 0 {
		bad("gc-interval", "must be positive, got %v", o.GCInterval)
	}
}

// validateProviderSettings asks every registered provider to check its
// flags, telling it whether --providers enables it; each error names its
// flag.
func (o *Options) validateProviderSettings() []error {
	var errs []error
	for _, r := range o.registered {
		errs = append(errs, r.settings.Validate(slices.Contains(o.Providers, string(r.Name)))...)
	}
	return errs
}

// checkAddr reports whether addr is a host:port a server can listen on.
func checkAddr(flagName, addr string, bad badFlag) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		bad(flagName, "%q is not host:port: %v", addr, err)
		return false
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil {
		bad(flagName, "%q: port %q is not a number from 0 to 65535", addr, port)
		return false
	} else if n == 0 {
		// Port 0 would bind somewhere nobody (probes, Prometheus) could find.
		bad(flagName, "%q: port 0 is not allowed: give a fixed port", addr)
		return false
	}
	return true
}

// sameListenAddr reports whether two valid listen addresses would clash: the
// same port on the same host, or on all interfaces.
func sameListenAddr(a, b string) bool {
	hostA, portA, _ := net.SplitHostPort(a)
	hostB, portB, _ := net.SplitHostPort(b)
	if portA != portB {
		return false
	}
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return hostA == hostB || wildcard(hostA) || wildcard(hostB)
}
