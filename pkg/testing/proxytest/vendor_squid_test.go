package proxytest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestVendorSquidChoosesExitIPBySession: the rig behaves like a proxy
// network: each session leaves from its own address and keeps it, for
// plain requests and CONNECT alike; other usernames and passwords get 407;
// Force moves a session onto another's address.
func TestVendorSquidChoosesExitIPBySession(t *testing.T) {
	v := StartVendorSquid(t, VendorOptions{UsernamePattern: `user-acme-session-([0-9a-f]+)`, Password: "pw-1", ExitIPs: 4})
	echo := func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprint(w, host)
	}
	plain := httptest.NewServer(http.HandlerFunc(echo))
	defer plain.Close()
	tlsTarget := httptest.NewTLSServer(http.HandlerFunc(echo))
	defer tlsTarget.Close()

	fetch := func(user, password, target string) (int, string) {
		t.Helper()
		proxy := &url.URL{Scheme: "http", Host: v.Addr, User: url.UserPassword(user, password)}
		tr := tlsTarget.Client().Transport.(*http.Transport).Clone()
		tr.Proxy = http.ProxyURL(proxy)
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		defer tr.CloseIdleConnections()
		resp, err := c.Get(target)
		if err != nil {
			if strings.Contains(err.Error(), "Proxy Authentication Required") {
				return http.StatusProxyAuthRequired, ""
			}
			t.Fatalf("GET %s as %s: %v", target, user, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, "" // squid's error page
		}
		return resp.StatusCode, string(body)
	}
	type answer struct {
		Status int
		Body   string
	}
	for _, tc := range []struct {
		name, user, password, target string
		want                         answer
	}{
		{"first session", "user-acme-session-aa", "pw-1", plain.URL, answer{200, "127.0.9.1"}},
		{"second session", "user-acme-session-bb", "pw-1", plain.URL, answer{200, "127.0.9.2"}},
		{"first session again", "user-acme-session-aa", "pw-1", plain.URL, answer{200, "127.0.9.1"}},
		{"second session over CONNECT", "user-acme-session-bb", "pw-1", tlsTarget.URL, answer{200, "127.0.9.2"}},
		{"username of another shape", "user-acme-aa", "pw-1", plain.URL, answer{407, ""}},
		{"wrong password", "user-acme-session-aa", "pw-2", plain.URL, answer{407, ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := fetch(tc.user, tc.password, tc.target)
			if diff := cmp.Diff(tc.want, answer{status, body}); diff != "" {
				t.Errorf("through the vendor (-want +got):\n%s", diff)
			}
		})
	}
	if diff := cmp.Diff(map[string]string{"aa": "127.0.9.1", "bb": "127.0.9.2"}, v.Sessions(t)); diff != "" {
		t.Errorf("Sessions (-want +got):\n%s", diff)
	}

	v.Force(t, "bb", "127.0.9.1")
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := fetch("user-acme-session-bb", "pw-1", plain.URL)
		if body == "127.0.9.1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("forced onto 127.0.9.1, session bb still leaves from %s", body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
