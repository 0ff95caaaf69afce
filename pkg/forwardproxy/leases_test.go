package forwardproxy_test

import (
	"bytes"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

const (
	leaseUser = "crawler"
	leasePass = "static-password-of-the-instance"
)

func leaseKeys(t *testing.T) []leasecred.Key {
	t.Helper()
	text, err := leasecred.NewKeyText()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := leasecred.ParseKeys(text)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// startKeyed is an in-process proxy with static credentials and a lease
// key, with exit ranges or not.
func startKeyed(t *testing.T, keys []leasecred.Key, ranges ...netip.Prefix) *proxytest.Proxy {
	t.Helper()
	return startProxy(t, proxytest.Options{Username: leaseUser, Password: leasePass, Configure: func(c *forwardproxy.Config) {
		c.LeaseKeys = keys
		c.ExitRanges = ranges
	}})
}

func signed(k leasecred.Key, user string, serial uint64, end time.Time) string {
	return basic(user, leasecred.Sign(k, user, leasecred.Claims{Ref: leasecred.Ref{Epoch: 7, Serial: serial}, End: end}))
}

// push posts updates to the proxy as the operator does, signed with k.
func push(t *testing.T, addr string, k leasecred.Key, updates ...leasecred.Update) int {
	t.Helper()
	body, auth := leasecred.EncodePush(k, updates)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+leasecred.PushPath, bytes.NewReader(body))
	req.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func TestLeaseCredentialsAdmitUntilTheirEnd(t *testing.T) {
	keys := leaseKeys(t)
	other := leaseKeys(t)
	echo := startEchoTarget(t)
	p := startKeyed(t, keys)
	hour := time.Now().Add(time.Hour)
	for name, tc := range map[string]struct {
		auth string
		want int
	}{
		"a lease credential":                          {auth: signed(keys[0], leaseUser, 1, hour), want: 200},
		"a lease credential of another key":           {auth: signed(other[0], leaseUser, 2, hour), want: 407},
		"a lease credential past its end":             {auth: signed(keys[0], leaseUser, 3, time.Now().Add(-time.Second)), want: 407},
		"the static credentials, on a one-exit proxy": {auth: basic(leaseUser, leasePass), want: 200},
		"the static credentials with a session":       {auth: basic(leaseUser+"+session-a", leasePass), want: 407},
		"none":                                        {want: 407},
	} {
		t.Run(name, func(t *testing.T) {
			c, resp := connect(t, p.Addr, echo.addr(), tc.auth)
			if resp.StatusCode != tc.want {
				t.Fatalf("CONNECT answered %d, want %d", resp.StatusCode, tc.want)
			}
			if tc.want == 200 {
				c.ping("hello")
			}
		})
	}
}

// TestOnlyTheOperatorsCredentialsNameTheKeys: the answers to the static
// credentials and to a credential of no lease (the operator's probes) name
// the key IDs; a lease holder's do not.
func TestOnlyTheOperatorsCredentialsNameTheKeys(t *testing.T) {
	keys := leaseKeys(t)
	echo := startEchoTarget(t)
	p := startKeyed(t, keys)
	probe := basic(leaseUser, leasecred.Sign(keys[0], leaseUser, leasecred.Claims{End: time.Now().Add(time.Minute)}))
	for name, tc := range map[string]struct {
		auth string
		want string
	}{
		"static":           {auth: basic(leaseUser, leasePass), want: keys[0].ID()},
		"the operator's":   {auth: probe, want: keys[0].ID()},
		"a lease holder's": {auth: signed(keys[0], leaseUser, 1, time.Now().Add(time.Hour)), want: ""},
	} {
		t.Run(name, func(t *testing.T) {
			_, resp := connect(t, p.Addr, echo.addr(), tc.auth)
			if got := resp.Header.Get(forwardproxy.LeaseKeysHeader); got != tc.want {
				t.Errorf("%s = %q, want %q", forwardproxy.LeaseKeysHeader, got, tc.want)
			}
		})
	}
}

// TestARangedProxyAdmitsASessionOnlyWithItsOwnCredential: on a proxy with
// exit ranges a session's exit is reached only with the credential signed
// for that session; the static credentials reach nothing.
func TestARangedProxyAdmitsASessionOnlyWithItsOwnCredential(t *testing.T) {
	keys := leaseKeys(t)
	p := startKeyed(t, keys, netip.MustParsePrefix("fd00:5e55:99::/64"))
	hour := time.Now().Add(time.Hour)
	own := leasecred.Sign(keys[0], leaseUser+"+session-aaaa", leasecred.Claims{Ref: leasecred.Ref{Epoch: 1, Serial: 1}, End: hour})
	for name, tc := range map[string]struct {
		user, pass string
		want       int
	}{
		// 502: admitted, and no IPv6 route to an IPv4 target from the range.
		"its own session":        {user: leaseUser + "+session-aaaa", pass: own, want: 502},
		"another member's id":    {user: leaseUser + "+session-bbbb", pass: own, want: 407},
		"a made-up id":           {user: leaseUser + "+session-made-up", pass: own, want: 407},
		"no session term":        {user: leaseUser, pass: own, want: 407},
		"the static credentials": {user: leaseUser, pass: leasePass, want: 407},
		"static with a session":  {user: leaseUser + "+session-aaaa", pass: leasePass, want: 407},
	} {
		t.Run(name, func(t *testing.T) {
			c := dial(t, p.Addr)
			resp, _ := c.roundTrip("GET http://127.0.0.1:9/ HTTP/1.1\r\nHost: 127.0.0.1:9\r\nProxy-Authorization: " + basic(tc.user, tc.pass) + "\r\nConnection: close\r\n\r\n")
			if resp.StatusCode != tc.want {
				t.Errorf("answered %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}

// TestAPushedEndRefusesAndCloses: a pushed end refuses the lease's
// credentials, fresh ones too, and closes its tunnels and kept-alive
// connections at once; another lease's go on.
func TestAPushedEndRefusesAndCloses(t *testing.T) {
	keys := leaseKeys(t)
	echo := startEchoTarget(t)
	target := proxytest.StartHTTPTarget(t)
	p := startKeyed(t, keys)
	hour := time.Now().Add(time.Hour)
	released := signed(keys[0], leaseUser, 1, hour)
	renewed := signed(keys[0], leaseUser, 1, hour.Add(time.Minute)) // a renewal's
	kept := signed(keys[0], leaseUser, 2, hour)

	tunnel, resp := connect(t, p.Addr, echo.addr(), released)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT answered %d", resp.StatusCode)
	}
	tunnel.ping("before")
	keptAlive := dial(t, p.Addr)
	get := func(c *conn, auth string) int {
		resp, _ := c.roundTrip("GET " + target.URL + "/generate_204 HTTP/1.1\r\nHost: " + strings.TrimPrefix(target.URL, "http://") + "\r\nProxy-Authorization: " + auth + "\r\n\r\n")
		return resp.StatusCode
	}
	if code := get(keptAlive, released); code != http.StatusNoContent {
		t.Fatalf("GET answered %d", code)
	}
	other, _ := connect(t, p.Addr, echo.addr(), kept)
	other.ping("other")

	if code := push(t, p.Addr, keys[0], leasecred.Update{Ref: leasecred.Ref{Epoch: 7, Serial: 1}, Until: hour.Add(time.Minute), Ended: true}); code != http.StatusNoContent {
		t.Fatalf("push answered %d", code)
	}
	tunnel.expectClosed()
	keptAlive.expectClosed()
	for _, auth := range []string{released, renewed} {
		if _, resp := connect(t, p.Addr, echo.addr(), auth); resp.StatusCode != 407 {
			t.Errorf("CONNECT after the end answered %d, want 407", resp.StatusCode)
		}
	}
	other.ping("still open")
}

// TestATunnelLivesAsLongAsItsLease: a tunnel is closed at its credential's
// end, unless a push or a fresh credential of the lease extended it.
func TestATunnelLivesAsLongAsItsLease(t *testing.T) {
	keys := leaseKeys(t)
	echo := startEchoTarget(t)
	p := startKeyed(t, keys)
	end := time.Now().Add(400 * time.Millisecond).Truncate(time.Millisecond) // a credential's precision

	expiring, _ := connect(t, p.Addr, echo.addr(), signed(keys[0], leaseUser, 1, end))
	pushed, _ := connect(t, p.Addr, echo.addr(), signed(keys[0], leaseUser, 2, end))
	fresh, _ := connect(t, p.Addr, echo.addr(), signed(keys[0], leaseUser, 3, end))
	if code := push(t, p.Addr, keys[0], leasecred.Update{Ref: leasecred.Ref{Epoch: 7, Serial: 2}, Until: end.Add(time.Hour)}); code != http.StatusNoContent {
		t.Fatalf("push answered %d", code)
	}
	// The holder of lease 3 uses a renewal's credential on a new connection.
	again, resp := connect(t, p.Addr, echo.addr(), signed(keys[0], leaseUser, 3, end.Add(time.Hour)))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT with the renewed credential answered %d", resp.StatusCode)
	}
	expiring.expectClosed()
	if time.Now().Before(end) {
		t.Errorf("closed before the credential's end")
	}
	pushed.ping("extended by the push")
	fresh.ping("extended by the fresh credential")
	again.ping("renewed")
}

func TestPushesAreSignedWithTheInstancesKey(t *testing.T) {
	keys := leaseKeys(t)
	echo := startEchoTarget(t)
	p := startKeyed(t, keys)
	hour := time.Now().Add(time.Hour)
	auth := signed(keys[0], leaseUser, 1, hour)
	if code := push(t, p.Addr, leaseKeys(t)[0], leasecred.Update{Ref: leasecred.Ref{Epoch: 7, Serial: 1}, Until: hour, Ended: true}); code != http.StatusForbidden {
		t.Errorf("a push signed with another key answered %d, want 403", code)
	}
	if c, resp := connect(t, p.Addr, echo.addr(), auth); resp.StatusCode != 200 {
		t.Errorf("the lease ended on a forged push: CONNECT answered %d", resp.StatusCode)
	} else {
		c.ping("alive")
	}
	unkeyed := startProxy(t, proxytest.Options{Username: leaseUser, Password: leasePass})
	if code := push(t, unkeyed.Addr, keys[0]); code != http.StatusNotFound {
		t.Errorf("a proxy without lease keys answered a push %d, want 404", code)
	}
}
