package forwardproxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// fakeResolver answers from a table, never from DNS: a name it does not
// know is NXDOMAIN. Names may resolve differently on each lookup (DNS
// rebinding): answers[name][i] is the answer to the i-th lookup, the last
// one repeating.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][][]string
	lookups map[string]int
}

func newFakeResolver(answers map[string][][]string) *fakeResolver {
	return &fakeResolver{answers: answers, lookups: map[string]int{}}
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seq, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := min(r.lookups[host], len(seq)-1)
	r.lookups[host]++
	var out []netip.Addr
	for _, s := range seq[i] {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

// dialSeam is the proxy's Config.DialContext in guard tests. It records
// every address the proxy asks to dial and connects only within
// 127.0.0.0/8; anything else fails the dial (and is recorded, for the test
// to fail on), so a broken guard can never reach beyond this machine.
type dialSeam struct {
	mu     sync.Mutex
	dialed []string
	names  []string // addresses that were not IP literals: a guard bug
}

func (d *dialSeam) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, addr)
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		d.names = append(d.names, addr)
	}
	d.mu.Unlock()
	if err != nil || !proxytest.Loopback.Contains(ap.Addr()) {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("dial seam: not dialling beyond 127.0.0.0/8")}
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func (d *dialSeam) take() (dialed, names []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	dialed, names = d.dialed, d.names
	d.dialed, d.names = nil, nil
	return dialed, names
}

// internalNames resolve to internal addresses through the fake resolver.
var internalNames = map[string][][]string{
	"metadata.google.internal":             {{"169.254.169.254"}},
	"kubernetes.default.svc.cluster.local": {{"10.96.0.1"}},
	"db.corp.example":                      {{"172.20.3.4"}},
	"router.home.example":                  {{"192.168.1.1"}},
	"carrier.example":                      {{"100.64.12.34"}},
	"localhost":                            {{"127.0.0.1", "::1"}},
	"v6.internal.example":                  {{"fd12:3456::1"}},
	"mapped.example":                       {{"::ffff:10.1.2.3"}},
	"nat64-metadata.example":               {{"64:ff9b::a9fe:a9fe"}},
	// inet_aton forms a C resolver would turn into 127.0.0.1.
	"127.1":      {{"127.0.0.1"}},
	"2130706433": {{"127.0.0.1"}},
	"0x7f.0.0.1": {{"127.0.0.1"}},
	// One public and one internal address: refused whichever comes first.
	"mixed.example":    {{"93.184.215.14", "10.0.0.7"}},
	"mixed-v6.example": {{"2606:4700::1111", "fe80::1"}},
	// Public on the first lookup, internal after (DNS rebinding).
	"rebind.example": {{"93.184.215.14"}, {"127.0.0.1"}},
	// Public: the guard hands it to the dialer.
	"public.example": {{"93.184.215.14"}},
}

// TestEgressGuardRefusesInternalDestinations drives a proxy with the
// default guard against every refused range, by CONNECT and by plain HTTP,
// as IP literals and as names resolving to them. Every refusal is a 403
// naming the rule, counted in /metrics, and nothing reaches the dialer.
func TestEgressGuardRefusesInternalDestinations(t *testing.T) {
	seam := &dialSeam{}
	p := startProxy(t, proxytest.Options{
		DefaultEgress: true,
		Configure: func(c *forwardproxy.Config) {
			c.DialContext = seam.dial
			c.Resolver = newFakeResolver(internalNames)
		},
	})
	tests := map[string]struct {
		host string // as it appears in a URL's or CONNECT's authority, without port
		rule string
	}{
		// IPv4
		"loopback":              {"127.0.0.1", "loopback"},
		"loopback top":          {"127.255.255.254", "loopback"},
		"rfc1918 10/8":          {"10.0.0.1", "private"},
		"rfc1918 10/8 top":      {"10.255.255.255", "private"},
		"rfc1918 172.16/12":     {"172.16.0.1", "private"},
		"rfc1918 172.16/12 top": {"172.31.255.254", "private"},
		"rfc1918 192.168/16":    {"192.168.0.1", "private"},
		"link-local":            {"169.254.1.1", "link-local"},
		"metadata":              {"169.254.169.254", "metadata"},
		"ecs task metadata":     {"169.254.170.2", "metadata"},
		"alibaba metadata":      {"100.100.100.200", "metadata"},
		"azure wireserver":      {"168.63.129.16", "metadata"},
		"cgnat":                 {"100.64.0.1", "cgnat"},
		"cgnat top":             {"100.127.255.254", "cgnat"},
		"multicast":             {"224.0.0.1", "multicast"},
		"multicast ssdp":        {"239.255.255.250", "multicast"},
		"broadcast":             {"255.255.255.255", "broadcast"},
		"unspecified":           {"0.0.0.0", "unspecified"},
		"this network":          {"0.1.2.3", "this-network"},
		"ietf protocol":         {"192.0.0.8", "ietf-protocol"},
		"documentation":         {"192.0.2.1", "documentation"},
		"benchmarking":          {"198.18.0.1", "benchmarking"},
		"reserved":              {"240.0.0.1", "reserved"},
		"6to4 relay":            {"192.88.99.1", "6to4-relay"},
		// IPv6
		"v6 loopback":              {"[::1]", "loopback"},
		"v6 unspecified":           {"[::]", "unspecified"},
		"unique local fc":          {"[fc00::1]", "unique-local"},
		"unique local fd":          {"[fd00::1]", "unique-local"},
		"aws v6 metadata":          {"[fd00:ec2::254]", "metadata"},
		"v6 link-local":            {"[fe80::1]", "link-local"},
		"v6 link-local with zone":  {"[fe80::1%25eth0]", "link-local"},
		"v6 multicast":             {"[ff02::1]", "multicast"},
		"v6 multicast site":        {"[ff05::1:3]", "multicast"},
		"site-local":               {"[fec0::1]", "site-local"},
		"discard":                  {"[100::1]", "discard"},
		"v6 documentation":         {"[2001:db8::1]", "documentation"},
		"teredo":                   {"[2001:0:5ef5:79fd::f7f7:f7f7]", "teredo"},
		"nat64 public":             {"[64:ff9b::808:808]", "nat64"},
		"nat64 of metadata":        {"[64:ff9b::a9fe:a9fe]", "metadata"},
		"6to4 of private":          {"[2002:a00:1::1]", "private"},
		"ipv4-compatible loopback": {"[::127.0.0.1]", "loopback"},
		"ipv4-translated":          {"[::ffff:0:808:808]", "ipv4-translated"},
		// IPv4-mapped forms
		"mapped loopback":     {"[::ffff:127.0.0.1]", "loopback"},
		"mapped loopback hex": {"[::ffff:7f00:1]", "loopback"},
		"mapped rfc1918":      {"[::ffff:10.0.0.1]", "private"},
		"mapped 172.16":       {"[::ffff:172.16.0.1]", "private"},
		"mapped 192.168":      {"[::ffff:192.168.0.1]", "private"},
		"mapped metadata":     {"[::ffff:169.254.169.254]", "metadata"},
		"mapped link-local":   {"[::ffff:169.254.1.1]", "link-local"},
		"mapped cgnat":        {"[::ffff:100.64.0.1]", "cgnat"},
		"mapped multicast":    {"[::ffff:224.0.0.1]", "multicast"},
		"mapped unspecified":  {"[::ffff:0.0.0.0]", "unspecified"},
		// Names, resolved through the fake resolver.
		"name of metadata":         {"metadata.google.internal", "metadata"},
		"name of a Service":        {"kubernetes.default.svc.cluster.local", "private"},
		"name of 172.16/12":        {"db.corp.example", "private"},
		"name of 192.168/16":       {"router.home.example", "private"},
		"name of cgnat":            {"carrier.example", "cgnat"},
		"localhost":                {"localhost", "loopback"},
		"name of unique local":     {"v6.internal.example", "unique-local"},
		"name of mapped":           {"mapped.example", "private"},
		"name of nat64 metadata":   {"nat64-metadata.example", "metadata"},
		"short dotted":             {"127.1", "loopback"},
		"decimal":                  {"2130706433", "loopback"},
		"hex dotted":               {"0x7f.0.0.1", "loopback"},
		"one internal of two":      {"mixed.example", "private"},
		"one internal of two (v6)": {"mixed-v6.example", "link-local"},
	}
	refused := map[string]int{}
	for name, tc := range tests {
		for _, method := range []string{"CONNECT", "GET"} {
			t.Run(name+"/"+method, func(t *testing.T) {
				status, rule, body := request(t, p.Addr, method, tc.host+":80")
				got := result{status, rule}
				if diff := cmp.Diff(result{http.StatusForbidden, tc.rule}, got); diff != "" {
					t.Errorf("status and X-Egress-Rule (-want +got):\n%s\nbody: %s", diff, body)
				}
				if !strings.Contains(body, "by rule "+tc.rule+" ") {
					t.Errorf("body %q does not name rule %s", body, tc.rule)
				}
				if dialed, _ := seam.take(); len(dialed) > 0 {
					t.Errorf("the guard handed %v to the dialer", dialed)
				}
			})
			refused[tc.rule]++
		}
	}
	metrics := scrape(t, p.Addr)
	for rule, n := range refused {
		want := fmt.Sprintf(`forward_proxy_egress_refused_total{rule=%q} %d`, rule, n)
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %s; got:\n%s", want, grepLines(metrics, "forward_proxy_egress"))
		}
	}
}

type result struct {
	Status int
	Rule   string
}

// TestEgressGuardDialsOnlyCheckedLiterals: what the guard admits reaches
// the dialer as the IP literal it checked, never as a name (which a dialer
// would resolve again: DNS rebinding). The dial seam refuses anything
// beyond loopback, so the public cases end in a 502.
func TestEgressGuardDialsOnlyCheckedLiterals(t *testing.T) {
	seam := &dialSeam{}
	resolver := newFakeResolver(internalNames)
	p := startProxy(t, proxytest.Options{
		DefaultEgress: true,
		Configure: func(c *forwardproxy.Config) {
			c.DialContext = seam.dial
			c.Resolver = resolver
		},
	})
	tests := []struct {
		name, host   string
		status       int
		rule, dialed string
	}{
		{"public literal", "93.184.215.14", http.StatusBadGateway, "", "93.184.215.14:80"},
		{"public v6 literal", "[2606:4700::1111]", http.StatusBadGateway, "", "[2606:4700::1111]:80"},
		{"public name", "public.example", http.StatusBadGateway, "", "93.184.215.14:80"},
		// First lookup public (dialled as the literal), second internal.
		{"rebinding, first lookup", "rebind.example", http.StatusBadGateway, "", "93.184.215.14:80"},
		{"rebinding, second lookup", "rebind.example", http.StatusForbidden, "loopback", ""},
		{"unknown name", "nowhere.example", http.StatusBadGateway, "", ""},
	}
	for _, method := range []string{"CONNECT", "GET"} {
		resolver.mu.Lock()
		resolver.lookups = map[string]int{}
		resolver.mu.Unlock()
		for _, tc := range tests {
			t.Run(method+"/"+tc.name, func(t *testing.T) {
				status, rule, body := request(t, p.Addr, method, tc.host+":80")
				if diff := cmp.Diff(result{tc.status, tc.rule}, result{status, rule}); diff != "" {
					t.Errorf("status and X-Egress-Rule (-want +got):\n%s\nbody: %s", diff, body)
				}
				dialed, names := seam.take()
				if len(names) > 0 {
					t.Errorf("the dialer was handed names %v: only checked IP literals may reach it", names)
				}
				var want []string
				if tc.dialed != "" {
					want = []string{tc.dialed}
				}
				if diff := cmp.Diff(want, dialed); diff != "" {
					t.Errorf("dialed (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestEgressLoopbackEndToEnd: a real target on loopback, reached through
// the proxy's real dialer: refused by default, admitted with an allow
// range (in-process and the binary's --allow-cidr), and refused again by
// a more specific --deny-cidr.
func TestEgressLoopbackEndToEnd(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "target")
	}))
	t.Cleanup(target.Close)
	targetAddr := strings.TrimPrefix(target.URL, "http://")
	echo := startEchoTarget(t)

	tests := map[string]struct {
		start  func(testing.TB, proxytest.Options) *proxytest.Proxy
		opts   proxytest.Options
		status int
		rule   string
	}{
		"in-process, default guard": {proxytest.StartInProcess, proxytest.Options{DefaultEgress: true}, http.StatusForbidden, "loopback"},
		"in-process, AllowCIDRs":    {proxytest.StartInProcess, proxytest.Options{}, http.StatusOK, ""},
		"binary, default guard":     {proxytest.StartBinary, proxytest.Options{DefaultEgress: true}, http.StatusForbidden, "loopback"},
		"binary, --allow-cidr":      {proxytest.StartBinary, proxytest.Options{DefaultEgress: true, Args: []string{"--allow-cidr=127.0.0.0/8"}}, http.StatusOK, ""},
		"binary, --allow-cidr and a narrower --deny-cidr": {proxytest.StartBinary,
			proxytest.Options{Args: []string{"--deny-cidr=127.0.0.1/32"}}, http.StatusForbidden, "deny-cidr"},
		"binary, a narrower --allow-cidr inside a --deny-cidr": {proxytest.StartBinary,
			proxytest.Options{DefaultEgress: true, Args: []string{"--deny-cidr=127.0.0.0/8", "--allow-cidr=127.0.0.1"}}, http.StatusOK, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := tc.start(t, tc.opts)
			status, rule, body := request(t, p.Addr, "GET", targetAddr)
			if diff := cmp.Diff(result{tc.status, tc.rule}, result{status, rule}); diff != "" {
				t.Errorf("GET: status and rule (-want +got):\n%s\nbody: %s", diff, body)
			}
			if tc.status == http.StatusOK && body != "target" {
				t.Errorf("GET: body %q, want the target's", body)
			}
			c, resp := connect(t, p.Addr, echo.addr(), "")
			if got := (result{resp.StatusCode, resp.Header.Get("X-Egress-Rule")}); got != (result{tc.status, tc.rule}) {
				t.Errorf("CONNECT: got %+v, want %+v", got, result{tc.status, tc.rule})
			}
			if resp.StatusCode == http.StatusOK {
				c.ping("through the tunnel")
			}
			if tc.status == http.StatusForbidden {
				want := fmt.Sprintf(`forward_proxy_egress_refused_total{rule=%q} 2`, tc.rule)
				if m := scrape(t, p.Addr); !strings.Contains(m, want+"\n") {
					t.Errorf("/metrics lacks %s; got:\n%s", want, grepLines(m, "forward_proxy_egress"))
				}
			}
		})
	}
}

func TestEgressPolicyRanges(t *testing.T) {
	pfx := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, v := range s {
			p, err := forwardproxy.ParseCIDR(v)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
		return out
	}
	type verdict struct {
		Allowed bool
		Rule    string
	}
	tests := map[string]struct {
		allow, deny []netip.Prefix
		addr        string
		want        verdict
	}{
		"public by default":                       {nil, nil, "93.184.215.14", verdict{true, "default"}},
		"public v6 by default":                    {nil, nil, "2606:4700::1111", verdict{true, "default"}},
		"allowed loopback":                        {pfx("127.0.0.0/8"), nil, "127.0.0.5", verdict{true, "allow-cidr"}},
		"allow does not reach beyond its range":   {pfx("127.0.0.0/8"), nil, "10.0.0.1", verdict{false, "private"}},
		"mapped allow range covers IPv4":          {pfx("::ffff:127.0.0.0/104"), nil, "127.0.0.1", verdict{true, "allow-cidr"}},
		"IPv4 allow range covers mapped address":  {pfx("127.0.0.0/8"), nil, "::ffff:127.0.0.1", verdict{true, "allow-cidr"}},
		"narrower deny wins":                      {pfx("10.0.0.0/8"), pfx("10.1.0.0/16"), "10.1.2.3", verdict{false, "deny-cidr"}},
		"narrower allow wins":                     {pfx("10.1.0.0/16"), pfx("10.0.0.0/8"), "10.1.2.3", verdict{true, "allow-cidr"}},
		"deny wins a tie":                         {pfx("10.0.0.0/8"), pfx("10.0.0.0/8"), "10.1.2.3", verdict{false, "deny-cidr"}},
		"deny a public range":                     {nil, pfx("93.184.0.0/16"), "93.184.215.14", verdict{false, "deny-cidr"}},
		"broad allow leaves metadata closed":      {pfx("0.0.0.0/0"), nil, "169.254.169.254", verdict{false, "metadata"}},
		"link-local allow leaves metadata closed": {pfx("169.254.0.0/16"), nil, "169.254.169.254", verdict{false, "metadata"}},
		"broad allow opens the rest":              {pfx("0.0.0.0/0"), nil, "169.254.1.1", verdict{true, "allow-cidr"}},
		"exact allow opens metadata":              {pfx("169.254.169.254"), nil, "169.254.169.254", verdict{true, "allow-cidr"}},
		"allowed nat64 still checks the embedded": {pfx("64:ff9b::/96"), nil, "64:ff9b::a00:1", verdict{false, "private"}},
		"allowed nat64 of a public address":       {pfx("64:ff9b::/96"), nil, "64:ff9b::808:808", verdict{true, "allow-cidr"}},
		"zone ignored":                            {nil, nil, "fe80::1%eth0", verdict{false, "link-local"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pol, err := forwardproxy.NewEgressPolicy(tc.allow, tc.deny)
			if err != nil {
				t.Fatal(err)
			}
			v := pol.Check(netip.MustParseAddr(tc.addr))
			if diff := cmp.Diff(tc.want, verdict{v.Allowed, v.Rule}); diff != "" {
				t.Errorf("Check(%s) (-want +got):\n%s\n%s", tc.addr, diff, v)
			}
		})
	}
}

func TestParseCIDR(t *testing.T) {
	tests := map[string]struct{ in, want, err string }{
		"ipv4":        {in: "10.0.0.0/8", want: "10.0.0.0/8"},
		"masked":      {in: "10.1.2.3/8", want: "10.0.0.0/8"},
		"bare ipv4":   {in: "127.0.0.1", want: "127.0.0.1/32"},
		"bare ipv6":   {in: "fd00::1", want: "fd00::1/128"},
		"mapped":      {in: "::ffff:10.0.0.0/104", want: "10.0.0.0/8"},
		"not a range": {in: "10.0.0.0/33", err: `"10.0.0.0/33" is not a CIDR range`},
		"a name":      {in: "example.com", err: `"example.com" is not a CIDR range or an IP address`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := forwardproxy.ParseCIDR(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseCIDR(%q) = %v, %v; want error %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("ParseCIDR(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
			}
		})
	}
}

// request sends one CONNECT or absolute-form GET for authority (host:port)
// on a fresh connection and returns the status, X-Egress-Rule and body.
func request(t *testing.T, proxyAddr, method, authority string) (status int, rule, body string) {
	t.Helper()
	var raw string
	if method == "CONNECT" {
		raw = "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n"
	} else {
		raw = "GET http://" + authority + "/ HTTP/1.1\r\nHost: " + authority + "\r\nConnection: close\r\n\r\n"
	}
	c := dial(t, proxyAddr)
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatalf("writing request: %v", err)
	}
	m := method
	if m == "CONNECT" {
		m = http.MethodConnect
	}
	resp, err := http.ReadResponse(c.r, &http.Request{Method: m})
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	defer resp.Body.Close()
	if method == "CONNECT" && resp.StatusCode == http.StatusOK {
		return resp.StatusCode, resp.Header.Get("X-Egress-Rule"), ""
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Egress-Rule"), string(b)
}

// scrape fetches the proxy's own /metrics.
func scrape(t *testing.T, proxyAddr string) string {
	t.Helper()
	resp, body := dial(t, proxyAddr).roundTrip("GET " + forwardproxy.MetricsPath + " HTTP/1.1\r\nHost: " + proxyAddr + "\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	return body
}

func grepLines(text, substr string) string {
	var out []string
	for l := range strings.SplitSeq(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
