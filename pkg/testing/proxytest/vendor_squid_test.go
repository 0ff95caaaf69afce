package proxytest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

// TestVendorSquidChoosesExitIPBySession: the rig behaves like a proxy
// network: sessions take the exit IPs in turn and keep theirs, for plain
// requests and CONNECT alike; other usernames and passwords get 407;
// Force moves a session onto another's address.
func TestVendorSquidChoosesExitIPBySession(t *testing.T) {
	v := StartVendorSquid(t, VendorOptions{UsernamePattern: `user-acme-session-([0-9a-f]+)`, Password: "pw-1", ExitIPs: 3})
	if diff := cmp.Diff([]string{"127.0.9.1", "127.0.9.2", "127.0.9.3"}, v.ExitIPs()); diff != "" {
		t.Errorf("ExitIPs (-want +got):\n%s", diff)
	}
	// The targets answer with the address the request came from: the exit IP.
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprint(w, host)
	})
	plain := httptest.NewServer(echo)
	t.Cleanup(plain.Close)
	tlsTarget := httptest.NewTLSServer(echo)
	t.Cleanup(tlsTarget.Close)

	type answer struct {
		Status int
		Body   string // the exit IP when Status is 200
	}
	fetch := func(t *testing.T, user, password, target string) answer {
		t.Helper()
		tr := tlsTarget.Client().Transport.(*http.Transport).Clone()
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: v.Addr, User: url.UserPassword(user, password)})
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(target)
		if err != nil {
			// A refused CONNECT is an error from the transport, not a response.
			if strings.Contains(err.Error(), "Proxy Authentication Required") {
				return answer{Status: http.StatusProxyAuthRequired}
			}
			t.Fatalf("GET %s as %s: %v", target, user, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s as %s: reading the body: %v", target, user, err)
		}
		if resp.StatusCode != http.StatusOK {
			return answer{Status: resp.StatusCode} // squid's error page
		}
		return answer{resp.StatusCode, string(body)}
	}

	const user, password = "user-acme-session-", "pw-1"
	for _, tc := range []struct {
		name, user, password string
		https                bool
		force                []string // session, exit IP: Force first, then retry until it shows
		want                 answer
	}{
		{name: "first session", user: user + "aa", password: password, want: answer{200, "127.0.9.1"}},
		{name: "second session leaves from another IP", user: user + "bb", password: password, want: answer{200, "127.0.9.2"}},
		{name: "first session repeats its IP", user: user + "aa", password: password, want: answer{200, "127.0.9.1"}},
		{name: "second session over CONNECT", user: user + "bb", password: password, https: true, want: answer{200, "127.0.9.2"}},
		{name: "third session", user: user + "cc", password: password, want: answer{200, "127.0.9.3"}},
		{name: "fourth session wraps round", user: user + "dd", password: password, want: answer{200, "127.0.9.1"}},
		{name: "username of another shape", user: "user-acme-aa", password: password, want: answer{Status: 407}},
		{name: "username of another shape over CONNECT", user: "user-acme-cc", password: password, https: true, want: answer{Status: 407}},
		{name: "wrong password", user: user + "aa", password: "pw-2", want: answer{Status: 407}},
		{name: "forced onto the first session's IP", user: user + "bb", password: password, force: []string{"bb", "127.0.9.1"}, want: answer{200, "127.0.9.1"}},
		{name: "forced session over CONNECT", user: user + "bb", password: password, https: true, want: answer{200, "127.0.9.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := plain.URL
			if tc.https {
				target = tlsTarget.URL
			}
			if tc.force != nil {
				v.Force(t, tc.force[0], tc.force[1])
			}
			got := fetch(t, tc.user, tc.password, target)
			// squid re-asks the helper only after credentialsttl (1s).
			for deadline := time.Now().Add(10 * time.Second); tc.force != nil && got != tc.want && time.Now().Before(deadline); {
				time.Sleep(200 * time.Millisecond)
				got = fetch(t, tc.user, tc.password, target)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("through the vendor as %s (-want +got):\n%s", tc.user, diff)
			}
		})
	}

	want := map[string]string{"aa": "127.0.9.1", "bb": "127.0.9.1", "cc": "127.0.9.3", "dd": "127.0.9.1"}
	if diff := cmp.Diff(want, v.Sessions(t)); diff != "" {
		t.Errorf("Sessions (-want +got):\n%s", diff)
	}
	// Four sessions logged in (and bb again after Force); three refusals.
	if ok, refused := v.Authentications(t); ok < 5 || refused != 3 {
		t.Errorf("Authentications = %d OK, %d refused; want at least 5 OK and 3 refused", ok, refused)
	}
}

// TestVendorSquidRefusesPatternWithoutOneGroup: a pattern without the
// session group fails at start, not at the first request.
func TestVendorSquidRefusesPatternWithoutOneGroup(t *testing.T) {
	integration.Needs(t, "squid and python3 from Debian (`make deps`)") // the auth helper checks the pattern
	ft := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartVendorSquid(ft, VendorOptions{UsernamePattern: `user-[a-z]+`, Password: "pw"})
	}()
	<-done
	if !strings.Contains(ft.msg, "exactly one group") {
		t.Errorf("StartVendorSquid with no group: fatal %q, want it to name the missing group", ft.msg)
	}
}

// fatalRecorder keeps a Fatalf's message instead of failing the test; run
// the code under test in its own goroutine, which Fatalf ends.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
