// Command local-up is what `make run` runs: the operator in the foreground.
//
// With KUBECONFIG set it runs the operator against that cluster. Without it,
// it brings up the embedded default: etcd and kube-apiserver from pkg/testing/testenv
// with their data under .local/, the CRD, a local HTTPS target, an existing
// forward proxy to point an External Proxy at, and the examples (one External
// and two local-provider Managed proxies), and prints what to try next.
// Ctrl-C stops everything it started and leaves no process behind.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/proxyfleet/proxy-operator/hack/local-up/options"
	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/gatewaycmd"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/operator"
	"github.com/proxyfleet/proxy-operator/pkg/provider/local"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// config is local-up's command line (package options).
type config = options.Options

func main() {
	var cfg config
	fs := options.NewFlagSet(&cfg)
	_ = fs.Parse(os.Args[1:]) // ExitOnError: exits 2 on a bad flag, 0 after -help
	if settings := cfg.LocalProvider(); settings.StateDir == "" {
		settings.StateDir = filepath.Join(cfg.Dir, "instances")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	if err := run(ctx, cfg); err != nil {
		klog.Background().Error(err, "local-up failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run(ctx context.Context, cfg config) error {
	if kubeconfig := os.Getenv("KUBECONFIG"); kubeconfig != "" {
		klog.FromContext(ctx).Info("KUBECONFIG is set: running the operator against that cluster", "kubeconfig", kubeconfig)
		cfg.Operator.Kubeconfig = kubeconfig
		return runOperator(ctx, cfg)
	}
	return runEmbedded(ctx, cfg)
}

func runEmbedded(ctx context.Context, cfg config) error {
	logger := klog.FromContext(ctx)
	steps := progress{start: time.Now()}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return err
	}
	steps.say("starting etcd and kube-apiserver in %s", dir)
	env, err := testenv.Start(ctx, testenv.Options{Dir: filepath.Join(dir, "apiserver")})
	if err != nil {
		return err
	}
	steps.say("etcd and kube-apiserver ready, the CRDs served")
	defer func() {
		if err := env.Stop(); err != nil {
			logger.Error(err, "Stopping the API server")
		}
	}()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	cfg.Operator.Kubeconfig = kubeconfig

	target, err := startTarget(cfg.TargetAddr)
	if err != nil {
		return fmt.Errorf("local HTTPS target: %w", err)
	}
	defer target.Close()
	externalProxy, err := startExternalProxy(cfg.ExternalProxyAddr)
	if err != nil {
		return fmt.Errorf("external forward proxy: %w", err)
	}
	defer externalProxy.Close()

	if err := createExamples(ctx, env.Config, cfg); err != nil {
		return err
	}
	steps.say("target, external proxy and examples created; starting the operator and the gateway")
	printNextSteps(kubeconfig, cfg)
	go steps.sayFirstReady(ctx, env.Config)
	return runOperator(ctx, cfg)
}

// progress says, on stdout, which step a run is on and the seconds since
// local-up started: a first run shows where its time goes (make run's own
// steps, the builds before it, say theirs).
type progress struct{ start time.Time }

func (p progress) say(format string, args ...any) {
	fmt.Printf("local-up: [%.0fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// sayFirstReady polls the examples until one Proxy is Ready on a probe of
// this run, and says so: the end of the way from `make run` to a proxy that
// can be leased. A Ready status that an earlier run left in etcd (kept
// under .local/) does not count: its last health check is older.
func (p progress) sayFirstReady(ctx context.Context, config *rest.Config) {
	proxies := versioned.NewForConfigOrDie(config).CrawlV1alpha1().Proxies(metav1.NamespaceDefault)
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		if list, err := proxies.List(ctx, metav1.ListOptions{}); err == nil {
			for _, px := range list.Items {
				if readySince(&px, p.start) {
					p.say("first Ready proxy: %s/%s", px.Namespace, px.Name)
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// readySince reports whether px is Ready on a health check at or after start
// (status times are whole seconds).
func readySince(px *crawlv1alpha1.Proxy, start time.Time) bool {
	checked := px.Status.LastHealthCheckTime
	return px.Status.Phase == crawlv1alpha1.PhaseReady && checked != nil && !checked.Time.Before(start.Truncate(time.Second))
}

// runOperator runs the operator, and the gateway replica beside it, until
// ctx ends; local instances it started are then stopped so that nothing
// outlives `make run`.
func runOperator(ctx context.Context, cfg config) error {
	if err := cfg.Operator.Validate(); err != nil {
		return err
	}
	gatewayDone := make(chan error, 1)
	if cfg.Gateway.Listen != "" {
		gw := cfg.Gateway
		gw.LeaseURLs = []string{"http://" + cfg.Operator.LeaseAddr}
		gw.LeaseAuth, gw.Kubeconfig, gw.DrainDelay = cfg.Operator.LeaseAuth, cfg.Operator.Kubeconfig, 0
		if err := gw.Validate(); err != nil {
			return err
		}
		go func() { gatewayDone <- gatewaycmd.Run(ctx, gw, operator.Version()) }()
	} else {
		gatewayDone <- nil
	}
	err := operator.Run(ctx, cfg.Operator)
	err = errors.Join(err, <-gatewayDone)
	if stopErr := stopLocalInstances(context.WithoutCancel(ctx), cfg.LocalProvider().StateDir); stopErr != nil {
		err = errors.Join(err, stopErr)
	}
	return err
}

// stopLocalInstances deletes every local-provider instance: they are
// detached so that they outlive an operator restart, but not `make run`.
// The next run recreates them (the controller finds them gone).
func stopLocalInstances(ctx context.Context, stateDir string) error {
	if _, err := os.Stat(stateDir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	prov, err := local.New(local.Options{StateDir: stateDir})
	if err != nil {
		return err
	}
	instances, err := prov.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue)
	if err != nil {
		return err
	}
	var errs []error
	for _, inst := range instances {
		errs = append(errs, prov.Delete(ctx, inst.ID))
	}
	klog.FromContext(ctx).Info("Stopped local proxy instances", "count", len(instances))
	return errors.Join(errs...)
}

// startTarget serves /generate_204 over TLS with a self-signed certificate;
// the examples probe it with tls.insecureSkipVerify.
func startTarget(addr string) (*httptest.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/generate_204" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		http.NotFound(w, r)
	}))
	srv.Listener = ln
	srv.StartTLS()
	return srv, nil
}

// startExternalProxy runs a forward proxy that stands for one the team
// already operates. It admits loopback, where make run's target lives
// (forward-proxy's egress guard refuses it by default).
func startExternalProxy(addr string) (interface{ Close() error }, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv, err := forwardproxy.New(forwardproxy.Config{
		Name:       "external-example",
		AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
	})
	if err != nil {
		return nil, err
	}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

// createExamples creates the External and local examples in the default
// namespace, pointed at this program's target and proxy. Existing objects
// (from an earlier run; etcd keeps its data under .local/) are left alone.
func createExamples(ctx context.Context, config *rest.Config, cfg config) error {
	client := versioned.NewForConfigOrDie(config).CrawlV1alpha1().Proxies(metav1.NamespaceDefault)
	host, port, err := splitHostPort(cfg.ExternalProxyAddr)
	if err != nil {
		return err
	}
	targetURL := "https://" + cfg.TargetAddr + "/generate_204"
	for _, file := range []string{"external.yaml", "local.yaml"} {
		proxies, err := readProxies(filepath.Join(cfg.Examples, file))
		if err != nil {
			return err
		}
		for _, p := range proxies {
			p.Spec.HealthCheck.URL = targetURL
			p.Spec.HealthCheck.TLS = &crawlv1alpha1.HealthCheckTLS{InsecureSkipVerify: true}
			if p.Spec.Mode == crawlv1alpha1.ModeExternal {
				p.Spec.Endpoint.Host, p.Spec.Endpoint.Port = host, port
			}
			_, err := client.Create(ctx, p, metav1.CreateOptions{FieldManager: "local-up"})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating example %s: %w", p.Name, err)
			}
		}
	}
	return createExamplePool(ctx, config, filepath.Join(cfg.Examples, "pool.yaml"), targetURL)
}

// createExamplePool creates examples/pool.yaml: its cloud-init Secret and
// its ProxyPool, pointed at this program's target.
func createExamplePool(ctx context.Context, config *rest.Config, path, targetURL string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	kube := kubernetes.NewForConfigOrDie(config)
	pools := versioned.NewForConfigOrDie(config).CrawlV1alpha1().ProxyPools(metav1.NamespaceDefault)
	for _, doc := range splitDocuments(data) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		switch meta.Kind {
		case "Secret":
			var s corev1.Secret
			if err := yaml.UnmarshalStrict(doc, &s); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if _, err := kube.CoreV1().Secrets(metav1.NamespaceDefault).Create(ctx, &s, metav1.CreateOptions{FieldManager: "local-up"}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating example Secret %s: %w", s.Name, err)
			}
		case "ProxyPool":
			var p crawlv1alpha1.ProxyPool
			if err := yaml.UnmarshalStrict(doc, &p); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			p.Spec.Template.Spec.HealthCheck.URL = targetURL
			p.Spec.Template.Spec.HealthCheck.TLS = &crawlv1alpha1.HealthCheckTLS{InsecureSkipVerify: true}
			if _, err := pools.Create(ctx, &p, metav1.CreateOptions{FieldManager: "local-up"}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating example pool %s: %w", p.Name, err)
			}
		}
	}
	return nil
}

func readProxies(path string) ([]*crawlv1alpha1.Proxy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*crawlv1alpha1.Proxy
	for _, doc := range splitDocuments(data) {
		var p crawlv1alpha1.Proxy
		if err := yaml.UnmarshalStrict(doc, &p); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if p.Kind == "Proxy" {
			out = append(out, &p)
		}
	}
	return out, nil
}

// splitDocuments splits a multi-document YAML file at its "---" lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	for _, doc := range documentSeparator.Split(string(data), -1) {
		if strings.TrimSpace(comment.ReplaceAllString(doc, "")) != "" {
			docs = append(docs, []byte(doc))
		}
	}
	return docs
}

var (
	documentSeparator = regexp.MustCompile(`(?m)^---\s*$`)
	comment           = regexp.MustCompile(`(?m)^#.*$`)
)

func splitHostPort(addr string) (string, int32, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseInt(portText, 10, 32)
	if err != nil {
		return "", 0, fmt.Errorf("port of %q: %w", addr, err)
	}
	return host, int32(port), nil
}

func printNextSteps(kubeconfig string, cfg config) {
	fmt.Printf(`
proxy-operator is starting on an embedded API server (state in %[1]s).

  Dashboard: http://%[3]s/ui/   (live fleet, members and leases; docs/dashboard.md)

In another terminal:

  export KUBECONFIG=%[2]s
  bin/kubectl get proxies -w
  bin/kubectl describe proxy local-1

  # lease a Ready proxy for 30s, use it, release it (the lease API runs with --lease-auth=none here)
  curl -s -XPOST http://%[3]s/v1/leases -d '{"holder":"me","namespace":"default","ttl":"30s"}'
  curl -s -XDELETE 'http://%[3]s/v1/leases/<id>?outcome=ok'
  curl -s 'http://%[3]s/v1/proxies?namespace=default'
  curl -s http://%[4]s/metrics | grep proxy_operator_proxies

  # or let the gateway tier's replica hold the lease: one proxy address, a sticky session (docs/gateway.md)
  curl -sk -x 'http://ns-default+session-1:none@%[5]s' https://%[6]s/generate_204 -o /dev/null -w '%%{http_code}\n'

Ctrl-C stops the gateway, the operator, its local proxies and the API server.

`, cfg.Dir, kubeconfig, cfg.Operator.LeaseAddr, cfg.Operator.MetricsAddr, cfg.Gateway.Listen, cfg.TargetAddr)
}
