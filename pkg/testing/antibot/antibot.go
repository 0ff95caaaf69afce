// Package antibot is a test site that defends itself the way sites that
// crawlers meet do, without knowing anything of the operator's ban rules:
// it counts requests per client IP address and, past a budget, bans that
// address. A banned address gets either a 403 or, for some addresses, a 200
// "challenge" page that carries a marker in its body (as a JavaScript
// challenge does), chosen per address by a seeded hash so that a run is
// repeatable. It serves the same pages over HTTP and HTTPS, on 127.0.0.1,
// so tests reach it through proxies that leave from distinct loopback
// addresses and see each address judged on its own.
//
// It is used only by tests.
package antibot

import (
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// ChallengeMarker is in the body of every challenge page, and in no page.
const ChallengeMarker = "cf-challenge-platform"

// Options shape a Site. The zero value bans an address after 20 requests,
// half the addresses with a challenge page.
type Options struct {
	// BanAfter is how many requests an address gets before it is banned.
	// Default 20; negative: none, every address is banned at once.
	BanAfter int
	// ChallengeShare is the share of addresses (0..1) banned with a 200
	// challenge page instead of a 403. Default 0.5; negative: none.
	ChallengeShare float64
	// Seed decides which addresses get a challenge page.
	Seed uint64
}

// Site is a running test site.
type Site struct {
	// HTTP and HTTPS serve the same pages; trust HTTPS with its
	// Certificate().
	HTTP, HTTPS *httptest.Server

	opts Options
	mu   sync.Mutex
	seen map[string]*client // by client IP
}

type client struct {
	requests int
	served   int // pages answered as pages, not bans
}

// Start runs a Site until the test ends.
func Start(t testing.TB, opts Options) *Site {
	t.Helper()
	switch {
	case opts.BanAfter == 0:
		opts.BanAfter = 20
	case opts.BanAfter < 0:
		opts.BanAfter = 0
	}
	if opts.ChallengeShare == 0 {
		opts.ChallengeShare = 0.5
	}
	s := &Site{opts: opts, seen: map[string]*client{}}
	s.HTTP = start(t, s, false)
	s.HTTPS = start(t, s, true)
	return s
}

func start(t testing.TB, h http.Handler, tls bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("antibot: %v", err)
	}
	srv.Listener = l
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
}

// ServeHTTP answers /page/{n} with a page, or a ban once the client's
// address has spent its budget; anything else is 404.
func (s *Site) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n, ok := strings.CutPrefix(r.URL.Path, "/page/")
	if _, err := strconv.Atoi(n); !ok || err != nil {
		http.NotFound(w, r)
		return
	}
	ip, _, _ := net.SplitHostPort(r.RemoteAddr)
	banned, challenge := s.count(ip)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	switch {
	case banned && challenge:
		fmt.Fprintf(w, "<!DOCTYPE html><html><head><title>Just a moment...</title></head><body><div id=%q>Checking your browser before accessing the site.</div></body></html>\n", ChallengeMarker)
	case banned:
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, "<!DOCTYPE html><html><head><title>403 Forbidden</title></head><body>Access denied.</body></html>\n")
	default:
		fmt.Fprintf(w, "<!DOCTYPE html><html><head><title>Page %s</title></head><body><h1>Page %s</h1><p>Served to %s.</p></body></html>\n", n, n, ip)
	}
}

// count records a request from ip: whether it is banned, and whether its
// ban is a challenge page.
func (s *Site) count(ip string) (banned, challenge bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.seen[ip]
	if c == nil {
		c = &client{}
		s.seen[ip] = c
	}
	c.requests++
	if c.requests > s.opts.BanAfter {
		return true, s.challenges(ip)
	}
	c.served++
	return false, false
}

// challenges says whether ip's ban is a challenge page: a seeded hash of
// the address under ChallengeShare.
func (s *Site) challenges(ip string) bool {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", s.opts.Seed, ip)
	return float64(h.Sum64()%1000)/1000 < s.opts.ChallengeShare
}

// Challenges reports whether a ban of ip would be a challenge page.
func (s *Site) Challenges(ip string) bool {
	return s.challenges(ip)
}

// Stats is what the site saw of one client address.
type Stats struct {
	// Requests counts every request; Served those answered with a page.
	Requests, Served int
	// Banned: the address spent its budget.
	Banned bool
}

// Seen is what the site saw, by client IP address.
func (s *Site) Seen() map[string]Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Stats, len(s.seen))
	for ip, c := range s.seen {
		out[ip] = Stats{Requests: c.requests, Served: c.served, Banned: c.requests > s.opts.BanAfter}
	}
	return out
}
