package forwardproxy_test

import (
	"bytes"
	"context"
	"errors"
	"hash/fnv"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2/textlogger"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
)

// hashResolver resolves every name, without DNS, to addresses picked by a
// hash of the name from a mix of internal and public ones, so that fuzzed
// names reach the guard with every kind of answer.
type hashResolver struct{}

var fuzzAnswers = [][]string{
	{"127.0.0.1"}, {"10.0.0.1"}, {"169.254.169.254"}, {"::1"}, {"fd00:ec2::254"},
	{"::ffff:192.168.0.1"}, {"64:ff9b::a9fe:a9fe"}, {"93.184.215.14"},
	{"93.184.215.14", "100.64.0.1"}, {"2606:4700::1111"},
}

func (hashResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(host))
	var out []netip.Addr
	for _, s := range fuzzAnswers[h.Sum32()%uint32(len(fuzzAnswers))] {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

// FuzzRequestHead sends arbitrary bytes as a request head to a proxy with
// the default egress guard. Whatever the head, the proxy must not panic,
// must answer or close, and must hand its dialer only IP literals that the
// guard admits. The dialer connects nowhere: it records and fails.
func FuzzRequestHead(f *testing.F) {
	for _, seed := range []string{
		"CONNECT 169.254.169.254:80 HTTP/1.1\r\nHost: 169.254.169.254:80\r\n\r\n",
		"GET http://metadata.google.internal/computeMetadata/v1/ HTTP/1.1\r\nHost: metadata.google.internal\r\n\r\n",
		"CONNECT [::ffff:127.0.0.1]:443 HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://[fe80::1%25eth0]:8080/ HTTP/1.1\r\nHost: a\r\nProxy-Authorization: Basic dTpw\r\n\r\n",
		"GET http://93.184.215.14/ HTTP/1.0\r\n\r\n",
		"GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n",
		"GET /metrics HTTP/1.1\r\nHost: proxy\r\n\r\n",
		"CONNECT 2130706433:80 HTTP/1.1\r\n\r\n",
		"POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}

	var (
		mu         sync.Mutex
		violations []string
	)
	policy, err := forwardproxy.NewEgressPolicy(nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	logs := &lockedBuffer{}
	srv, err := forwardproxy.New(forwardproxy.Config{
		Resolver:    hashResolver{},
		DialTimeout: time.Second,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			ap, err := netip.ParseAddrPort(addr)
			mu.Lock()
			switch {
			case err != nil:
				violations = append(violations, "dialer handed a name: "+addr)
			case !policy.Check(ap.Addr()).Allowed:
				violations = append(violations, "dialer handed a refused address: "+addr)
			}
			mu.Unlock()
			return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("fuzz: no dials")}
		},
		Logger: textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(2), textlogger.Output(logs))),
	})
	if err != nil {
		f.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	f.Cleanup(func() { srv.Close() })

	f.Fuzz(func(t *testing.T, head []byte) {
		c, err := net.DialTimeout("tcp", l.Addr().String(), ioTimeout)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(ioTimeout))
		if _, err := c.Write(head); err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
			t.Fatalf("writing: %v", err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		// Read whatever comes until the proxy closes; a tunnel to nowhere
		// never opens (the dialer fails), so every connection ends.
		out, err := io.ReadAll(c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("no answer and no close within %v; got %q", ioTimeout, out)
		}
		if len(out) > 0 && !bytes.HasPrefix(out, []byte("HTTP/1.")) {
			t.Fatalf("answer is not HTTP: %q", out)
		}
		mu.Lock()
		v := violations
		violations = nil
		mu.Unlock()
		if len(v) > 0 {
			t.Fatalf("egress guard bypassed by %q: %v", head, v)
		}
		if l := logs.String(); strings.Contains(l, "http: panic serving") {
			t.Fatalf("proxy panicked on %q:\n%s", head, l)
		}
	})
}

func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe")
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
