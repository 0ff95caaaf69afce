package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// Fuzz targets for what a client controls: the username and the request
// head. Run one with, e.g.:
//
//	go test -run '^$' -fuzz '^FuzzRequestHead$' -fuzztime 10s ./pkg/gateway

func FuzzParseUsername(f *testing.F) {
	for _, seed := range []string{"", "ns-crawl+pool-eu+session-42", "pool-eu-west", "colour-blue", "ns-", "+", "ns-a+ns-b", "session-\x00", "session-é", "a", "a-", "-a", "A", "a.b", "a_b", "ns-a.b", "pool-A_b.c-9", strings.Repeat("a", 63), strings.Repeat("a", 64)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, username string) {
		target, err := ParseUsername(username)
		if err != nil {
			var termErr *TermError
			if !errors.As(err, &termErr) {
				t.Fatalf("error %T %v, want a *TermError", err, err)
			}
			if !slices.Contains(strings.Split(username, "+"), termErr.Term) {
				t.Fatalf("the error names %q, which is not a term of %q", termErr.Term, username)
			}
			return
		}
		// What parsed, re-joined, parses to the same.
		var terms []string
		for _, kv := range [][2]string{{"ns", target.Namespace}, {"pool", target.Pool}, {"session", target.Session}} {
			if kv[1] != "" {
				terms = append(terms, kv[0]+"-"+kv[1])
			}
		}
		again, err := ParseUsername(strings.Join(terms, "+"))
		if err != nil || again != target {
			t.Fatalf("%q parsed to %+v; re-joined it parses to %+v, %v", username, target, again, err)
		}
		_ = target.Selector() // must not panic
	})
}

// fuzzLeases grants every acquire on one upstream that needs credentials.
type fuzzLeases struct{}

const fuzzUpstreamPassword = "upstream-secret-never-shown"

func (fuzzLeases) Acquire(_ context.Context, _ auth.User, req client.AcquireRequest) (client.Lease, *proxyaccess.Credentials, error) {
	if req.Namespace == "full" {
		return client.Lease{}, nil, &client.Error{StatusCode: http.StatusServiceUnavailable, Code: wire.CodeNoneFree, Message: "no matching Ready proxy has free capacity", RetryAfter: time.Second}
	}
	return client.Lease{ID: "id", Proxy: client.LeasedProxy{Namespace: "crawl", Name: "p", URL: "http://127.0.0.1:9"}, TTL: time.Minute, ExpiresAt: time.Now().Add(time.Minute)},
		&proxyaccess.Credentials{Username: "fleet", Password: fuzzUpstreamPassword}, nil
}
func (fuzzLeases) Renew(context.Context, auth.User, string, time.Duration, client.Report) (client.Lease, *proxyaccess.Credentials, error) {
	return client.Lease{}, nil, fuzzLeaseGone
}
func (fuzzLeases) Release(context.Context, auth.User, string, client.Outcome, string, int64) error {
	return nil
}
func (fuzzLeases) Get(context.Context, auth.User, string) (client.Lease, error) {
	return client.Lease{}, fuzzLeaseGone
}
func (fuzzLeases) ReleaseSession(context.Context, auth.User, string, string, client.Outcome, string) error {
	return nil
}

// fuzzLeaseGone is the lease API's answer for a lease it no longer has.
var fuzzLeaseGone = &client.Error{StatusCode: http.StatusNotFound, Code: wire.CodeNotFound, Message: "no such lease"}

// fuzzAuth accepts the token "good" for user u, allowed in namespace crawl and full.
type fuzzAuth struct{}

func (fuzzAuth) Authenticate(_ context.Context, token string) (auth.User, error) {
	if token != "good" {
		return auth.User{}, fmt.Errorf("%w: no", auth.ErrUnauthenticated)
	}
	return auth.User{Name: "u"}, nil
}

func (fuzzAuth) Authorize(_ context.Context, _ auth.User, attrs auth.Attributes) (bool, string, error) {
	return attrs.Namespace == "crawl" || attrs.Namespace == "full", "", nil
}

// FuzzRequestHead feeds request heads to the gateway's handler: it never
// panics, answers only with its documented statuses (the one upstream
// refuses every dial, so nothing succeeds), dials nothing but that
// upstream (observed through the dialer seam: nothing is ever connected),
// and never shows the upstream's password.
func FuzzRequestHead(f *testing.F) {
	good := "Proxy-Authorization: Basic " + basic("ns-crawl+session-1", "good") + "\r\n"
	for _, seed := range []string{
		"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n" + good + "\r\n",
		"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n" + good + "\r\n",
		"GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n" + good + "\r\n",
		"GET / HTTP/1.1\r\nHost: example.com\r\n" + good + "\r\n",
		"CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n" + good + "\r\n",
		"GET http://example.com/ HTTP/1.1\r\nProxy-Authorization: Basic " + basic("ns-full", "good") + "\r\n\r\n",
		"GET http://example.com/ HTTP/1.1\r\nProxy-Authorization: Basic " + basic("colour-blue", "good") + "\r\n\r\n",
		"GET http://example.com/ HTTP/1.1\r\nProxy-Authorization: Basic " + basic("ns-other", "good") + "\r\n\r\n",
		"GET http://example.com/ HTTP/1.1\r\nProxy-Authorization: Basic !!!\r\n\r\n",
		"GET http://example.com/ HTTP/1.1\r\nProxy-Authorization: Bearer good\r\n\r\n",
		"GET http://example.com/ HTTP/1.1\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	var mu sync.Mutex
	var dialed []string
	g, err := New(Config{
		Leases: fuzzLeases{}, Authenticator: fuzzAuth{}, Authorizer: fuzzAuth{},
		Dial: func(_ context.Context, _, addr string) (net.Conn, error) {
			mu.Lock()
			dialed = append(dialed, addr)
			mu.Unlock()
			return nil, errors.New("refused by the test's dialer")
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	allowed := []int{http.StatusBadRequest, http.StatusProxyAuthRequired, http.StatusForbidden, http.StatusBadGateway, http.StatusServiceUnavailable}
	f.Fuzz(func(t *testing.T, head []byte) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
		if err != nil {
			return // net/http's parser refuses it before the gateway sees it
		}
		req.RemoteAddr = "127.0.0.1:1234"
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		if !slices.Contains(allowed, rec.Code) {
			t.Fatalf("answered %d %q", rec.Code, rec.Body.String())
		}
		if strings.Contains(rec.Body.String(), fuzzUpstreamPassword) || strings.Contains(fmt.Sprint(rec.Header()), fuzzUpstreamPassword) {
			t.Fatalf("the upstream's password reached the client: %v %q", rec.Header(), rec.Body.String())
		}
		mu.Lock()
		defer mu.Unlock()
		for _, addr := range dialed {
			if addr != "127.0.0.1:9" {
				t.Fatalf("dialed %q, which is not the leased upstream", addr)
			}
		}
		dialed = dialed[:0]
	})
}

func basic(user, pass string) string {
	r := &http.Request{Header: http.Header{}}
	r.SetBasicAuth(user, pass)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}
