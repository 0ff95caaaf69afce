package operator

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/fake"
)

// withFlags sets o's flags from args, as a command line would.
func withFlags(o *Options, args ...string) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		panic(err) // a test's own typo
	}
}

// flagValues compares the registered providers' settings by the values of
// their flags.
var flagValues = cmp.Transformer("flagValues", func(registered []registeredProvider) map[string]string {
	fs := flag.NewFlagSet("values", flag.ContinueOnError)
	for _, r := range registered {
		r.settings.AddFlags(fs)
	}
	values := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { values[f.Name] = f.Value.String() })
	return values
})

// validOptions are defaults that pass Validate wherever the test runs.
func validOptions(mods ...func(*Options)) Options {
	o := DefaultOptions()
	o.LeaderElectNamespace = "proxy-operator"
	for _, mod := range mods {
		mod(&o)
	}
	return o
}

func TestValidate(t *testing.T) {
	tests := map[string]struct {
		mod func(*Options)
		// wantErrs are substrings of the error, one per expected problem; nil: valid.
		wantErrs []string
	}{
		"defaults": {mod: func(*Options) {}},
		"every provider, local with a state dir": {mod: func(o *Options) {
			o.Providers = []string{"kubernetes", "local", "gce"}
			withFlags(o, "--local-state-dir=/var/lib/proxy-operator")
		}},
		"no leader election needs no lease settings": {mod: func(o *Options) {
			o.LeaderElect = false
			o.LeaderElectNamespace = ""
			o.LeaderElectLeaseDuration = 0
		}},
		"one namespace":        {mod: func(o *Options) { o.Namespace = "crawlers" }},
		"ipv6 metrics address": {mod: func(o *Options) { o.MetricsAddr = "[::1]:9090" }},
		"same port on different hosts": {mod: func(o *Options) {
			o.MetricsAddr, o.LeaseAddr = "127.0.0.1:9000", "127.0.0.2:9000"
		}},

		"zero workers":     {mod: func(o *Options) { o.Workers = 0 }, wantErrs: []string{"--workers: must be at least 1"}},
		"negative workers": {mod: func(o *Options) { o.Workers = -3 }, wantErrs: []string{"--workers: must be at least 1, got -3"}},
		"zero health workers": {mod: func(o *Options) { o.HealthWorkers = 0 },
			wantErrs: []string{"--health-workers: must be at least 1"}},
		"zero probes per endpoint": {mod: func(o *Options) { o.HealthMaxProbesPerEndpoint = 0 },
			wantErrs: []string{"--health-max-probes-per-endpoint: must be at least 1, got 0"}},
		"client-go's default QPS with the default latency share": {mod: func(o *Options) { o.KubeAPIQPS, o.KubeAPIBurst = 5, 10 }},
		"negative latency updates": {mod: func(o *Options) { o.HealthLatencyUpdatesPerSecond = -1 },
			wantErrs: []string{"--health-latency-updates-per-second: must not be negative, got -1"}},
		"latency updates at the whole API budget": {mod: func(o *Options) { o.HealthLatencyUpdatesPerSecond = 100 },
			wantErrs: []string{"--health-latency-updates-per-second: must be below --kube-api-qps (100)"}},
		"zero qps":             {mod: func(o *Options) { o.KubeAPIQPS = 0 }, wantErrs: []string{"--kube-api-qps: must be positive"}},
		"burst below qps":      {mod: func(o *Options) { o.KubeAPIBurst = 50 }, wantErrs: []string{"--kube-api-burst: must be at least --kube-api-qps (100)"}},
		"bad namespace":        {mod: func(o *Options) { o.Namespace = "Not_A_Namespace" }, wantErrs: []string{`--namespace: "Not_A_Namespace" is not a namespace name`}},
		"metrics addr no port": {mod: func(o *Options) { o.MetricsAddr = "localhost" }, wantErrs: []string{`--metrics-addr: "localhost" is not host:port`}},
		"metrics addr bad port": {mod: func(o *Options) { o.MetricsAddr = ":http-alt" },
			wantErrs: []string{`--metrics-addr: ":http-alt": port "http-alt" is not a number`}},
		"metrics addr port out of range": {mod: func(o *Options) { o.MetricsAddr = ":70000" },
			wantErrs: []string{`--metrics-addr: ":70000": port "70000" is not a number from 0 to 65535`}},
		"metrics addr port 0": {mod: func(o *Options) { o.MetricsAddr = "127.0.0.1:0" },
			wantErrs: []string{`--metrics-addr: "127.0.0.1:0": port 0 is not allowed`}},
		"lease addr bad": {mod: func(o *Options) { o.LeaseAddr = "8080" }, wantErrs: []string{`--lease-addr: "8080" is not host:port`}},
		"lease and metrics on one port": {mod: func(o *Options) { o.LeaseAddr, o.MetricsAddr = ":9090", "127.0.0.1:9090" },
			wantErrs: []string{"--lease-addr: must differ from --metrics-addr"}},
		"unknown lease auth": {mod: func(o *Options) { o.LeaseAuth = "oidc" }, wantErrs: []string{`--lease-auth: must be "kubernetes" or "none", got "oidc"`}},
		"unknown provider": {mod: func(o *Options) { o.Providers = []string{"kubernetes", "nowhere"} },
			wantErrs: []string{`--providers: unknown provider "nowhere" (known: ` + strings.Join(BuiltinProviders().Names(), ", ") + ")"}},
		"provider twice":  {mod: func(o *Options) { o.Providers = []string{"gce", "gce"} }, wantErrs: []string{`--providers: provider "gce" is listed twice`}},
		"local no state":  {mod: func(o *Options) { o.Providers = []string{"local"} }, wantErrs: []string{"--local-state-dir: must be set when --providers includes local"}},
		"zero gc":         {mod: func(o *Options) { o.GCInterval = 0 }, wantErrs: []string{"--gc-interval: must be positive"}},
		"no lease ns":     {mod: func(o *Options) { o.LeaderElectNamespace = "" }, wantErrs: []string{"--leader-elect-namespace: must be set when --leader-elect is true"}},
		"bad lease ns":    {mod: func(o *Options) { o.LeaderElectNamespace = "-x" }, wantErrs: []string{`--leader-elect-namespace: "-x" is not a namespace name`}},
		"zero retry":      {mod: func(o *Options) { o.LeaderElectRetryPeriod = 0 }, wantErrs: []string{"--leader-elect-retry-period: must be positive"}},
		"renew too short": {mod: func(o *Options) { o.LeaderElectRenewDeadline = 2 * time.Second }, wantErrs: []string{"--leader-elect-renew-deadline: must be greater than 1.2 × --leader-elect-retry-period (2s), got 2s"}},
		"lease not above renew": {mod: func(o *Options) { o.LeaderElectLeaseDuration = 10 * time.Second },
			wantErrs: []string{"--leader-elect-lease-duration: must be greater than --leader-elect-renew-deadline (10s), got 10s"}},
		"hetzner without cluster ID and token": {mod: func(o *Options) { o.Providers = []string{"hetzner"} },
			wantErrs: []string{"--hetzner-cluster-id: must be set", "--hetzner-token-secret: must be set"}},
		"azure without cluster ID, subscription and group": {mod: func(o *Options) { o.Providers = []string{"azure"} },
			wantErrs: []string{"--azure-cluster-id: must be set", "--azure-subscription-id: must be set", "--azure-resource-group: must be set"}},
		"azure credentials secret not namespace/name": {mod: func(o *Options) {
			o.Providers = []string{"azure"}
			withFlags(o, "--azure-cluster-id=prod", "--azure-subscription-id=sub", "--azure-resource-group=rg", "--azure-credentials-secret=sp")
		}, wantErrs: []string{`--azure-credentials-secret: must be namespace/name, got "sp"`}},
		"digitalocean without cluster ID and token": {mod: func(o *Options) { o.Providers = []string{"digitalocean"} },
			wantErrs: []string{"--digitalocean-cluster-id: must be set", "--digitalocean-token-secret: must be set"}},
		"digitalocean cluster ID no tag": {mod: func(o *Options) {
			o.Providers = []string{"digitalocean"}
			withFlags(o, "--digitalocean-cluster-id=prod.eu", "--digitalocean-token-secret=ns/token")
		}, wantErrs: []string{`--digitalocean-cluster-id: must be 1-63 letters, digits, dashes or underscores (it becomes a DigitalOcean tag), got "prod.eu"`}},
		"hetzner token not namespace/name": {mod: func(o *Options) {
			o.Providers = []string{"hetzner"}
			withFlags(o, "--hetzner-cluster-id=prod", "--hetzner-token-secret=token")
		}, wantErrs: []string{`--hetzner-token-secret: must be namespace/name, got "token"`}},
		"every problem at once": {
			mod: func(o *Options) {
				o.Workers = 0
				o.MetricsAddr = "nope"
				o.Providers = []string{"aws"}
			},
			wantErrs: []string{"--workers", "--metrics-addr", "--providers"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := validOptions(tc.mod)
			err := o.Validate()
			if len(tc.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors %q", tc.wantErrs)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.wantErrs) {
				t.Errorf("Validate() reported %d problems, want %d:\n%v", len(lines), len(tc.wantErrs), err)
			}
			for _, want := range tc.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate() = %q\nwant it to contain %q", err, want)
				}
			}
		})
	}
}

func TestAddFlags(t *testing.T) {
	tests := map[string]struct {
		args []string
		want func(*Options)
	}{
		"no flags keep the defaults": {},
		"every flag": {
			args: []string{
				"--kubeconfig=/etc/kubeconfig", "--namespace=crawlers", "--workers=8",
				"--kube-api-qps=20.5", "--kube-api-burst=40",
				"--leader-elect=false", "--leader-elect-namespace=ops",
				"--leader-elect-lease-duration=30s", "--leader-elect-renew-deadline=20s", "--leader-elect-retry-period=4s",
				"--lease-addr=127.0.0.1:8081", "--lease-auth=none", "--metrics-addr=:9191",
				"--health-workers=5", "--health-latency-updates-per-second=2.5", "--providers= kubernetes, local ,", "--local-state-dir=/tmp/state", "--gc-interval=1h",
			},
			want: func(o *Options) {
				o.Kubeconfig, o.Namespace, o.Workers = "/etc/kubeconfig", "crawlers", 8
				o.KubeAPIQPS, o.KubeAPIBurst = 20.5, 40
				o.LeaderElect, o.LeaderElectNamespace = false, "ops"
				o.LeaderElectLeaseDuration, o.LeaderElectRenewDeadline, o.LeaderElectRetryPeriod = 30*time.Second, 20*time.Second, 4*time.Second
				o.LeaseAddr, o.LeaseAuth, o.MetricsAddr = "127.0.0.1:8081", "none", ":9191"
				o.HealthLatencyUpdatesPerSecond = 2.5
				o.HealthWorkers, o.Providers, o.GCInterval = 5, []string{"kubernetes", "local"}, time.Hour
				withFlags(o, "--local-state-dir=/tmp/state")
			},
		},
		"empty providers": {
			args: []string{"--providers="},
			want: func(o *Options) { o.Providers = nil },
		},
		"profiler on": {
			args: []string{"--profiling"},
			want: func(o *Options) { o.Profiling = true },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := validOptions()
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			got.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			want := validOptions()
			if tc.want != nil {
				tc.want(&want)
			}
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(Options{}), flagValues); diff != "" {
				t.Errorf("options after parsing (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaultsAreValid(t *testing.T) {
	o := DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Errorf("DefaultOptions().Validate() = %v", err)
	}
}

func TestInClusterNamespace(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tests := map[string]struct {
		path string
		want string
	}{
		"in a cluster":   {path: write("ns", "crawl-system\n"), want: "crawl-system"},
		"empty file":     {path: write("empty", " \n"), want: "default"},
		"not in cluster": {path: filepath.Join(dir, "missing"), want: "default"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := inClusterNamespace(tc.path); got != tc.want {
				t.Errorf("inClusterNamespace() = %q, want %q", got, tc.want)
			}
		})
	}
}

// failingSettings are a provider's settings whose build fails.
type failingSettings struct{ err error }

func (failingSettings) AddFlags(*flag.FlagSet) {}

func (failingSettings) Validate(bool) []error { return nil }

func (f failingSettings) New(context.Context, provider.Env) (provider.Provider, error) {
	return nil, f.err
}

func TestBuildProviders(t *testing.T) {
	fakeProvider := fake.New()
	errBoom := errors.New("no credentials")
	registry := provider.Registry{
		{Name: "kubernetes", NewSettings: provider.NoFlags(func() provider.Provider { return fakeProvider })},
		{Name: "gce", NewSettings: func() provider.Settings { return failingSettings{errBoom} }},
	}
	tests := map[string]struct {
		names   []string
		want    []crawlv1alpha1.ProviderName
		wantErr string
	}{
		"none enabled":      {want: []crawlv1alpha1.ProviderName{}},
		"enabled and built": {names: []string{"kubernetes"}, want: []crawlv1alpha1.ProviderName{"kubernetes"}},
		"enabled, not registered": {names: []string{"local"},
			wantErr: `--providers: unknown provider "local" (known: kubernetes, gce)`},
		"build fails": {names: []string{"gce"},
			wantErr: `--providers: starting provider "gce": no credentials`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := NewOptions(registry)
			o.Providers = tc.names
			got, err := buildProviders(t.Context(), o, provider.Env{})
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("buildProviders() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gotNames := []crawlv1alpha1.ProviderName{}
			for name := range got {
				gotNames = append(gotNames, name)
			}
			if diff := cmp.Diff(tc.want, gotNames); diff != "" {
				t.Errorf("enabled providers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSameListenAddr(t *testing.T) {
	tests := map[string]struct {
		a, b string
		want bool
	}{
		"different ports":          {":9090", ":8080", false},
		"both wildcard":            {":9090", ":9090", true},
		"wildcard and one host":    {"0.0.0.0:9090", "127.0.0.1:9090", true},
		"ipv6 wildcard":            {"[::]:9090", "127.0.0.1:9090", true},
		"same host":                {"127.0.0.1:9090", "127.0.0.1:9090", true},
		"different hosts one port": {"127.0.0.1:9090", "10.0.0.1:9090", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := sameListenAddr(tc.a, tc.b); got != tc.want {
				t.Errorf("sameListenAddr(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

func TestLatencyUpdatesPerSecond(t *testing.T) {
	tests := map[string]struct {
		qps  float32
		flag float64
		want float64
	}{
		"default: 5% of the default QPS":  {qps: 100, want: 5},
		"5% of client-go's default QPS":   {qps: 5, want: 0.25},
		"set: the flag, whatever the QPS": {qps: 100, flag: 20, want: 20},
	}
	got, want := map[string]float64{}, map[string]float64{}
	for name, tc := range tests {
		o := validOptions(func(o *Options) { o.KubeAPIQPS, o.HealthLatencyUpdatesPerSecond = tc.qps, tc.flag })
		got[name], want[name] = o.latencyUpdatesPerSecond(), tc.want
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("latencyUpdatesPerSecond (-want +got):\n%s", diff)
	}
}
