package faultkit

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

// BootFunc runs what an instance would from b and returns how to halt
// it. It must not block.
type BootFunc func(b Boot) (halt func())

// BootForwardProxy does what an instance's cloud-init would with the
// operator's part of the user-data: it reads the settings file (the
// kit's format, UserDataEnv) and serves our forward proxy on the public IP
// with that port, those credentials and lease keys, with the exit ranges of
// BootExitRanges, admitting targets in allow; rec (may be nil) records
// the exit ranges. A test then sees an instance Ready only if the
// operator's probe went through the proxy its own create configured. We
// cannot route a cloud's prefix on the test machine: the ranges are the
// proxy's configuration, not dialled from.
func BootForwardProxy(t testing.TB, rec *Boots, allow ...netip.Prefix) BootFunc {
	return func(b Boot) func() {
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
}

// machines runs a fake's BootFunc for the instances it starts and halts
// each once its instance is gone, and every one left when the test ends.
// Its methods are safe for concurrent use; a nil boot runs nothing.
type machines struct {
	boot  BootFunc
	mu    sync.Mutex
	halts map[string]func()
}

// newMachines runs boot (may be nil) for the instances Start names.
func newMachines(t testing.TB, boot BootFunc) *machines {
	m := &machines{boot: boot, halts: map[string]func(){}}
	t.Cleanup(func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		for id, halt := range m.halts {
			halt()
			delete(m.halts, id)
		}
	})
	return m
}

// Start boots the instance id from b, unless it runs already.
func (m *machines) Start(id string, b Boot) {
	if m.boot == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.halts[id]; !ok {
		m.halts[id] = m.boot(b)
	}
}

// Halt stops what runs for the instance id, if anything does.
func (m *machines) Halt(id string) {
	m.mu.Lock()
	halt := m.halts[id]
	delete(m.halts, id)
	m.mu.Unlock()
	if halt != nil {
		halt()
	}
}
