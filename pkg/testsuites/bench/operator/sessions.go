package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
)

// Sessions mode (-instances, issue 54): beside each size's N External
// proxies, the same N as members of one pool with spec.membersPerInstance,
// each a session on one of -instances shared instances. The instances are
// External proxies at one fleet listener (a pool with an External template
// names one proxy); the fleet ignores credentials and answers the probe
// itself, so what differs is the operator's side: N session Proxies, whose
// credentials derive from the instance's Secret (no Secret per session;
// its lease key makes every probe of a session sign a credential), the
// pool controller's placement.

// sessionsPool is the bench's pool: n members on instances instances.
const sessionsPool = "sessions"

// membersPerInstance spreads n members over instances.
func membersPerInstance(n, instances int) int32 { return int32((n + instances - 1) / instances) }

// createSessionsPool creates the instance credentials (marked for proxies)
// and the pool whose members are sessions on instances at addr.
func (b *bench) createSessionsPool(ctx context.Context, ns string, n int, addr string) error {
	key, err := leasecred.NewKeyText()
	if err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "instance-auth", Namespace: ns,
			Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}},
		StringData: map[string]string{"username": "bench", "password": "bench-instance-pw", leasecred.SecretKey: key},
	}
	if _, err := b.kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the instance credentials: %w", err)
	}
	host, port, _ := net.SplitHostPort(addr)
	portNum, _ := strconv.Atoi(port)
	hc := newProxy(ns, 0, addr, b.cfg.interval).Spec.HealthCheck
	pool := &crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Name: sessionsPool, Namespace: ns},
		Spec: crawlv1alpha1.ProxyPoolSpec{
			Replicas:           ptr.To(int32(n)),
			MembersPerInstance: ptr.To(membersPerInstance(n, b.cfg.instances)),
			Template: crawlv1alpha1.ProxyTemplate{Spec: crawlv1alpha1.ProxySpec{
				Mode:        crawlv1alpha1.ModeExternal,
				Endpoint:    &crawlv1alpha1.Endpoint{Host: host, Port: int32(portNum)},
				ExitRanges:  []crawlv1alpha1.CIDR{"fd00:5e55:b::/48"},
				Auth:        &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: secret.Name}},
				HealthCheck: hc,
			}},
		},
	}
	if _, err := b.crawl.CrawlV1alpha1().ProxyPools(ns).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the pool: %w", err)
	}
	return nil
}

// formatSessions sets each size's single-exit run beside its sessions run.
func formatSessions(cfg config, results []result) string {
	if cfg.instances == 0 {
		return ""
	}
	var sb strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	p("\n### Sessions on %d shared instances beside single-exit proxies (issue 54)\n\n", cfg.instances)
	p("| fleet | exits (members) | Proxy objects | first create → all Ready (s) | operator CPU to converge (core-s) | leases acquired | lease acquires/s | steady operator CPU (cores) | steady operator RSS (MiB) | operator peak RSS (MiB) |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		if r.spec.proxies == 0 || r.steady == nil || r.spec.qps != ourQPS {
			continue
		}
		fleet, objects := "single-exit External proxies", r.spec.proxies
		if r.spec.sessions {
			fleet = fmt.Sprintf("sessions, %d per instance", membersPerInstance(r.spec.proxies, cfg.instances))
			objects += cfg.instances
		}
		st := r.steady
		p("| %s | %d | %d | %.1f | %.1f | %d | %.0f | %.3f | %.0f | %.0f |\n",
			fleet, r.spec.proxies, objects, r.ready.Seconds(), r.opCPU, r.leases,
			float64(r.leases)/r.acquire.Seconds(), st.operator.cores, mib(st.operator.rss), mib(st.operator.hwm))
	}
	p("\nLease acquires/s: the bench acquires half the fleet from %d goroutines through the lease API, each acquire a round trip (%v client timeout); the store is the same for both fleets.\n", createWorkers, time.Minute)
	return sb.String()
}

// dropFinalizers lets the Managed Proxies of ns (a pool's sessions) go
// without an operator: the run's operator is gone, and what stays
// Terminating would load the next run's API server.
func (b *bench) dropFinalizers(ctx context.Context, ns string) {
	list, err := b.crawl.CrawlV1alpha1().Proxies(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		progress("listing the proxies of %s: %v", ns, err)
		return
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(createWorkers)
	for _, p := range list.Items {
		if len(p.Finalizers) == 0 {
			continue
		}
		g.Go(func() error {
			_, err := b.crawl.CrawlV1alpha1().Proxies(ns).Patch(gctx, p.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		progress("dropping the finalizers of %s: %v", ns, err)
	}
}
