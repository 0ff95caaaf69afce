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
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
)

func main() {
	var (
		api       = flag.String("lease-api", "http://127.0.0.1:8080", "the lease API")
		tokenFile = flag.String("token-file", "", "bearer token file (a ServiceAccount token); empty for --lease-auth=none")
		namespace = flag.String("namespace", "default", "namespace of the proxies")
		selector  = flag.String("selector", "", "label selector of the proxies, e.g. pool=dev")
		target    = flag.String("url", "", "the URL to fetch through each leased proxy (required)")
		rounds    = flag.Int("rounds", 3, "how many fetches to make")
		insecure  = flag.Bool("insecure", false, "accept any TLS certificate from the target (make run's self-signed target)")
	)
	flag.Parse()
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
	hostname, _ := os.Hostname()
	for round := 1; round <= *rounds && ctx.Err() == nil; round++ {
		req := client.AcquireRequest{
			Holder: fmt.Sprintf("crawler-%s-%d", hostname, os.Getpid()), Namespace: *namespace, Selector: *selector,
			TTL: 30 * time.Second, Domain: targetURL.Hostname(), Wait: 10 * time.Second,
		}
		// Hold renews the lease while fetch runs and releases it afterwards
		// with the outcome fetch's error implies.
		err := leases.Hold(ctx, req, func(ctx context.Context, l client.Lease) error {
			return fetch(ctx, l, *target, *insecure)
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

// fetch requests target through the leased proxy; a 403 or 429 from the
// site counts as a ban of this proxy for that domain.
func fetch(ctx context.Context, l client.Lease, target string, insecure bool) error {
	proxyURL, err := l.ProxyURL() // credentials included when the proxy needs them
	if err != nil {
		return err
	}
	transport := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{InsecureSkipVerify: insecure}} //nolint:gosec // opt-in, for make run's self-signed target
	defer transport.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	start := time.Now()
	resp, err := (&http.Client{Transport: transport, Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	fmt.Printf("%s via %s/%s: %s in %s\n", target, l.Proxy.Namespace, l.Proxy.Name, resp.Status, time.Since(start).Round(time.Millisecond))
	if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusTooManyRequests {
		return client.Banned(req.URL.Hostname())
	}
	return nil
}
