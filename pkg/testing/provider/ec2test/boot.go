package ec2test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
)

// Boot is what an instance's cloud-init would have to start the proxy:
// its operator-built user-data, its public IP, and the IPv6 prefixes its
// cloud routes to it, as its boot script would find them (a metadata
// service, an on-link route).
type Boot struct {
	Name, UserData, PublicIP string
	RoutedPrefixes           []string
}

// Boots records the exit ranges each booted forward proxy was started
// with, by instance name, so a test asserts on what the instance runs.
type Boots struct {
	mu         sync.Mutex
	exitRanges map[string][]string
}

// ExitRanges are the --exit-range values instance name's forward proxy
// was started with; false when it was not booted.
func (b *Boots) ExitRanges(name string) ([]string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.exitRanges[name]
	return r, ok
}

func (b *Boots) record(name string, ranges []netip.Prefix) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.exitRanges == nil {
		b.exitRanges = map[string][]string{}
	}
	out := []string{}
	for _, r := range ranges {
		out = append(out, r.String())
	}
	b.exitRanges[name] = out
}

// BootExitRanges are the exit ranges the operator's user-data starts the
// proxy with: none unless its settings file names the exit-ranges file
// (PROXY_EXIT_RANGES_FILE), then the routed prefixes, which the boot
// script writes there; an error when it asks and the cloud routes none.
func BootExitRanges(env map[string]string, routed []string) ([]netip.Prefix, error) {
	if env["PROXY_EXIT_RANGES_FILE"] == "" {
		return nil, nil
	}
	if len(routed) == 0 {
		return nil, errors.New("the user-data sets up an exit range, and the cloud routes no IPv6 prefix to the instance")
	}
	out := make([]netip.Prefix, 0, len(routed))
	for _, r := range routed {
		p, err := netip.ParsePrefix(r)
		if err != nil {
			return nil, fmt.Errorf("routed prefix %q: %w", r, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// ServeForwardProxy does what an instance's cloud-init would with the
// operator's part of the user-data: it reads the settings file (the
// kit's format) and serves our forward proxy on the public IP with that
// port, those credentials and lease keys, with the exit ranges of BootExitRanges,
// admitting targets in allow; rec (may be nil) records the exit ranges.
// We cannot route a cloud's prefix on the test machine: the ranges are
// the proxy's configuration, not dialled from. It returns the halt.
func ServeForwardProxy(t testing.TB, b Boot, rec *Boots, allow ...netip.Prefix) func() {
	env, err := UserDataEnv(b.UserData)
	if err != nil {
		t.Errorf("instance %s: %v", b.Name, err)
		return func() {}
	}
	ranges, err := BootExitRanges(env, b.RoutedPrefixes)
	if err != nil {
		t.Errorf("instance %s: %v", b.Name, err)
		return func() {}
	}
	var keys []leasecred.Key
	if text := env["PROXY_LEASE_KEYS"]; text != "" {
		if keys, err = leasecred.ParseKeys(text); err != nil {
			t.Errorf("instance %s: PROXY_LEASE_KEYS: %v", b.Name, err)
			return func() {}
		}
	}
	srv, err := forwardproxy.New(forwardproxy.Config{
		Username: env["PROXY_AUTH_USERNAME"], Password: env["PROXY_AUTH_PASSWORD"], AllowCIDRs: allow, ExitRanges: ranges,
		LeaseKeys: keys,
	})
	if err != nil {
		t.Errorf("instance %s: %v", b.Name, err)
		return func() {}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(b.PublicIP, env["PROXY_PORT"]))
	if err != nil {
		t.Errorf("instance %s: %v", b.Name, err)
		return func() {}
	}
	rec.record(b.Name, ranges)
	go func() {
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("instance %s: serve: %v", b.Name, err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
}

// BootForwardProxy is a WithBoot that serves our forward proxy as the
// instance's cloud-init would (ServeForwardProxy), its exit ranges the
// instance's delegated prefixes, recorded in rec (may be nil).
func BootForwardProxy(t testing.TB, rec *Boots, allow ...netip.Prefix) func(Instance) func() {
	return func(in Instance) func() {
		return ServeForwardProxy(t, Boot{Name: in.ID, UserData: in.UserData, PublicIP: in.PublicIP, RoutedPrefixes: in.Ipv6Prefixes}, rec, allow...)
	}
}
