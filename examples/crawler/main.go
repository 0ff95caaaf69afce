// Command crawler is a crawler worker's loop on the lease client: lease a
// Ready proxy, fetch a URL through it while the lease is kept renewed, and
// release it with the outcome (ok, or banned for that domain when the site
// refused us, which cools the proxy down for that domain).
//
//	go run ./examples/crawler --lease-api http://127.0.0.1:8080 --namespace default \
//	    --url https://127.0.0.1:8443/generate_204 --insecure   # against `make run`
//
// In a cluster, pass --token-file /var/run/secrets/kubernetes.io/serviceaccount/token
// and bind the worker's ServiceAccount to artifacts/rbac/crawler-role.yaml.
// With --gateway it leases nothing itself: each fetch goes through the
// gateway tier (docs/gateway.md) in rotating mode, with the token as the
// proxy password:
//
//	crawler --gateway http://proxy-operator-gateway.proxy-operator:3128 --namespace crawl \
//	    --token-file /var/run/secrets/kubernetes.io/serviceaccount/token --url http://example.com/
//
// make image --images=crawler builds it into ghcr.io/proxyfleet/crawler
// (hack/image); the real-node suite runs it as a Pod.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
)

// version is set by hack/image (-X main.version).
var version = "dev"

func main() {
	var (
		api       = flag.String("lease-api", "http://127.0.0.1:8080", "the lease API")
		gateway   = flag.String("gateway", "", "fetch through this gateway (http://host:port) instead of leasing from --lease-api")
		showBody  = flag.Bool("show-body", false, "print the first line of each page")
		showVer   = flag.Bool("version", false, "print the version and exit")
		tokenFile = flag.String("token-file", "", "bearer token file (a ServiceAccount token); empty for --lease-auth=none")
		namespace = flag.String("namespace", "default", "namespace of the proxies")
		selector  = flag.String("selector", "", "label selector of the proxies, e.g. pool=dev")
		target    = flag.String("url", "", "the URL to fetch through each leased proxy (required)")
		rounds    = flag.Int("rounds", 3, "how many fetches to make")
		insecure  = flag.Bool("insecure", false, "accept any TLS certificate from the target (make run's self-signed target)")
		admitWait = flag.Duration("admit-wait", 5*time.Second, "how long a refused connection to a leased proxy is retried: a new Pod is admitted by the proxy's NetworkPolicy only once the network plugin has learnt its address")
	)
	flag.Parse()
	if *showVer {
		fmt.Println("crawler " + version)
		return
	}
	if *target == "" {
		fmt.Fprintln(os.Stderr, "crawler: --url is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var opts []client.Option
	if *tokenFile != "" {
		opts = append(opts, client.WithToken(client.TokenFile(*tokenFile)))
	}
	leases, err := client.New(*api, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crawler:", err)
		os.Exit(1)
	}
	targetURL, err := url.Parse(*target)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crawler: --url:", err)
		os.Exit(2)
	}
	if *gateway != "" {
		os.Exit(crawlThroughGateway(ctx, *gateway, *tokenFile, *namespace, *target, *rounds, *insecure, *showBody))
	}
	hostname, _ := os.Hostname()
	for round := 1; round <= *rounds && ctx.Err() == nil; round++ {
		req := client.AcquireRequest{
			Holder: fmt.Sprintf("crawler-%s-%d", hostname, os.Getpid()), Namespace: *namespace, Selector: *selector,
			TTL: 30 * time.Second, Domain: targetURL.Hostname(), Wait: 10 * time.Second,
		}
		// Hold renews the lease while fetch runs and releases it afterwards
		// with the outcome fetch's error implies.
		err := leases.Hold(ctx, req, func(ctx context.Context, l client.Lease) error {
			// The lease's credentials, renewed with it: a proxy that checks
			// lease credentials admits them only while the lease lives.
			status, err := fetch(ctx, l.ProxyFunc(), *target, *insecure, *showBody, *admitWait)
			if err != nil {
				return err
			}
			fmt.Printf("%s via %s/%s: %s\n", *target, l.Proxy.Namespace, l.Proxy.Name, status)
			if isBan(status) {
				return client.Banned(targetURL.Hostname())
			}
			return nil
		})
		var banned *client.BannedError
		switch {
		case errors.As(err, &banned):
			fmt.Printf("round %d: banned by %s; that proxy cools down for it\n", round, banned.Domain)
		case errors.Is(err, client.ErrUnavailable):
			fmt.Printf("round %d: no proxy free (%v)\n", round, err)
		case err != nil:
			fmt.Printf("round %d: %v\n", round, err)
		}
	}
}

// crawlThroughGateway fetches target rounds times through the gateway, which
// leases a proxy of namespace for each connection; it returns the exit code.
func crawlThroughGateway(ctx context.Context, gateway, tokenFile, namespace, target string, rounds int, insecure, showBody bool) int {
	proxyURL, err := url.Parse(gateway)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crawler: --gateway:", err)
		return 2
	}
	failed := 0
	for round := 1; round <= rounds && ctx.Err() == nil; round++ {
		password := ""
		if tokenFile != "" {
			// Read each round: the kubelet rotates a projected token.
			raw, err := os.ReadFile(tokenFile)
			if err != nil {
				fmt.Fprintln(os.Stderr, "crawler:", err)
				return 1
			}
			password = strings.TrimSpace(string(raw))
		}
		proxyURL.User = url.UserPassword("ns-"+namespace, password)
		// No retry of a refusal: the chart puts no policy in front of the
		// gateway, so a refused connection means no gateway is there.
		status, err := fetch(ctx, http.ProxyURL(proxyURL), target, insecure, showBody, 0)
		if err != nil {
			fmt.Printf("round %d: %v\n", round, err)
			failed++
			continue
		}
		fmt.Printf("%s via gateway %s: %s\n", target, proxyURL.Host, status)
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// fetch requests target through the proxy proxy names and returns the
// response's status and time (and first line, with showBody).
func fetch(ctx context.Context, proxy func(*http.Request) (*url.URL, error), target string, insecure, showBody bool, admitWait time.Duration) (string, error) {
	dial := admittingDialer{wait: admitWait}
	transport := &http.Transport{Proxy: proxy, DialContext: dial.DialContext, TLSClientConfig: &tls.Config{InsecureSkipVerify: insecure}} //nolint:gosec // opt-in, for make run's self-signed target
	defer transport.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return "", err
	}
	start := time.Now()
	resp, err := (&http.Client{Transport: transport, Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", err
	}
	status := fmt.Sprintf("%s in %s", resp.Status, time.Since(start).Round(time.Millisecond))
	if showBody {
		first, _, _ := strings.Cut(string(body), "\n")
		status += fmt.Sprintf(", body %q", first)
	}
	if dial.refusedFor > 0 {
		status += fmt.Sprintf(" (the proxy refused this Pod for %s before admitting it)", dial.refusedFor.Round(time.Millisecond))
	}
	return status, nil
}

// admittingDialer retries a refused connection for up to wait. A leased
// proxy is Ready (the operator reached it), so a refusal is most likely the
// proxy Pod's NetworkPolicy not admitting this Pod yet: policy plugins learn
// a new Pod's address from the API server, after its container has started
// (kube-router on the real node: about half a second).
type admittingDialer struct {
	wait       time.Duration
	refusedFor time.Duration
}

func (d *admittingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	start := time.Now()
	for refused := false; ; refused = true {
		conn, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) >= d.wait {
			if err == nil && refused {
				d.refusedFor = time.Since(start)
			}
			return conn, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// isBan: a 403 or 429 from the site counts as a ban of the proxy for that
// domain.
func isBan(status string) bool {
	return strings.HasPrefix(status, "403 ") || strings.HasPrefix(status, "429 ")
}
