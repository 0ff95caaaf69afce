package forwardproxy

import (
	"flag"
	"net/netip"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
)

// CommandLine is cmd/forward-proxy's flags, parsed.
type CommandLine struct {
	Listen            string
	Name              string
	MaxConns          int
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	DialTimeout       time.Duration
	XForwardedFor     bool
	AuthFile          string
	LeaseKeyFile      string
	CloudInit         string
	ShutdownTimeout   time.Duration
	ShowVersion       bool
	AllowCIDRs        CIDRList
	DenyCIDRs         CIDRList
	SourceAddr        string
	ExitRanges        CIDRList
}

// NewFlagSet is cmd/forward-proxy's command line, with klog's flags, parsed
// into c. The command parses it; the docs test (docs/docs_test.go) lists it,
// to check every flag the docs name. credentialsHelp says where basic-auth
// credentials come from besides --auth-file.
func NewFlagSet(name string, c *CommandLine, credentialsHelp string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	klog.InitFlags(fs)
	fs.StringVar(&c.Listen, "listen", ":3128", "address to listen on; host:0 picks a free port (see the \"listening\" log line)")
	fs.StringVar(&c.Name, "name", DefaultName, "pseudonym in the Via header")
	fs.IntVar(&c.MaxConns, "max-conns", 1024, "maximum concurrent client connections (0: no limit); beyond it HTTP gets 503 and CONNECT is refused")
	fs.DurationVar(&c.ReadHeaderTimeout, "read-header-timeout", DefaultReadHeaderTimeout, "time allowed to read a request's headers")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", DefaultIdleTimeout, "close keep-alive connections and tunnels idle this long")
	fs.DurationVar(&c.DialTimeout, "dial-timeout", DefaultDialTimeout, "time allowed to connect to a target (504 when exceeded)")
	fs.BoolVar(&c.XForwardedFor, "x-forwarded-for", false, "add the client's IP to X-Forwarded-For on plain HTTP requests (leaks the crawler's origin)")
	fs.StringVar(&c.AuthFile, "auth-file", "", "file holding username:password for basic auth (alternative to "+credentialsHelp+")")
	fs.StringVar(&c.LeaseKeyFile, "lease-key-file", "", "file holding the instance's lease keys, one base64url key a line (alternative to $PROXY_LEASE_KEYS): "+
		"a lease's credentials, signed with one of them, then admit their username only until the lease ends, and the operator's pushes of ended leases (POST "+leasecred.PushPath+") close its connections; see docs/api.md")
	fs.StringVar(&c.CloudInit, "cloud-init", "", "path of the cloud-init user-data delivered to this instance; its size and sha256 are logged, never its content")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 25*time.Second, "on SIGTERM, how long to wait for requests and tunnels in flight")
	fs.BoolVar(&c.ShowVersion, "version", false, "print the version and exit")
	fs.Var(&c.AllowCIDRs, "allow-cidr", "admit destinations in this range, which the egress guard refuses by default (repeatable; e.g. 127.0.0.0/8). "+
		"The most specific --allow-cidr or --deny-cidr containing an address decides; metadata servers yield only to a range at least as specific as theirs")
	fs.StringVar(&c.SourceAddr, "source-addr", "", "local IP address targets see the proxy connect from (a secondary address of the host; the local provider gives each instance its own loopback one); empty: the system's choice")
	fs.Var(&c.ExitRanges, "exit-range", "dial targets from an address of this prefix routed to the host (repeatable; e.g. fd00:1::/64, or an IPv4 range of the host's addresses): "+
		"the username's +session-<id> term picks it, the same for the same session; no session, a fresh one per connection. Needs the prefix routed to the host as local, see docs/ipv6.md")
	fs.Var(&c.DenyCIDRs, "deny-cidr", "refuse destinations in this range, beside the internal ranges refused by default (repeatable)")
	return fs
}

// CIDRList is a repeatable flag of CIDR ranges (a bare address is a
// single-address range).
type CIDRList []netip.Prefix

func (l *CIDRList) String() string {
	parts := make([]string, len(*l))
	for i, p := range *l {
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}

// Set adds one range, as ParseCIDR reads it.
func (l *CIDRList) Set(v string) error {
	p, err := ParseCIDR(v)
	if err != nil {
		return err
	}
	*l = append(*l, p)
	return nil
}
