package forwardproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
)

// Defaults applied by [New] to zero fields of [Config].
const (
	DefaultName              = "forward-proxy"
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultDialTimeout       = 10 * time.Second
)

// Realm is the basic-auth realm announced in Proxy-Authenticate.
const Realm = "proxy"

// Resolver resolves a host name to its addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a [Server]. The zero value is a working proxy without
// authentication or connection limit.
type Config struct {
	// Name is the pseudonym in the Via header ("Via: 1.1 <Name>").
	// Default DefaultName. It must be a single token (no spaces or commas).
	Name string

	// Username and Password enable basic authentication when either is set;
	// then both must be set and Username must not contain ':'.
	Username string
	Password string

	// MaxConns is the maximum number of concurrent client connections
	// (keep-alive connections and open tunnels included). Connections beyond
	// it are served one response, 503, and closed: plain HTTP requests get a
	// 503 with Retry-After, CONNECT requests are refused with a 503 before
	// any dial. GET /healthz is answered even beyond the limit, so liveness
	// probes do not fail under load. Zero means no limit. Enforced only by
	// [Server.Serve], not when the Server is mounted as a plain http.Handler.
	MaxConns int

	// ReadHeaderTimeout bounds the time to read a request's headers.
	// Default DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration

	// IdleTimeout closes keep-alive client connections idle this long, idle
	// upstream connections in the pool, and tunnels with no traffic in either
	// direction for this long. Default DefaultIdleTimeout.
	IdleTimeout time.Duration

	// DialTimeout bounds connecting to a target (DNS included). A timeout
	// answers 504. Default DefaultDialTimeout.
	DialTimeout time.Duration

	// XForwardedFor adds the client's IP address to X-Forwarded-For on
	// forwarded plain HTTP requests (appending to the client's own). Off by
	// default: then any X-Forwarded-For, Forwarded, X-Forwarded-Host and
	// X-Forwarded-Proto sent by the client are removed too.
	XForwardedFor bool

	// DialContext dials targets; the Server applies DialTimeout to the
	// context it passes. It is only ever handed an IP literal ("ip:port")
	// that the egress guard admitted: names are resolved through Resolver
	// first. Default: a net.Dialer with TCP keep-alives that checks the
	// socket's address once more. Tests use it to inject faults and to
	// observe what would be dialled.
	DialContext func(ctx context.Context, network, address string) (net.Conn, error)

	// SourceAddr, when valid, is the local address targets are dialled
	// from (the default DialContext only): one host, several exit IPs.
	SourceAddr netip.Addr

	// ExitRanges, when set, are the prefixes targets are dialled from: the
	// username's session term ("user+session-<id>", see [SplitSession])
	// picks an address of them ([ExitAddr]), the same for the same
	// session; without a session every connection gets a fresh one. A
	// target is dialled only on the address families of the ranges: a
	// name without an address of such a family is answered 502 (see
	// docs/ipv6.md). The default DialContext binds the address with
	// IP_FREEBIND/IPV6_FREEBIND; the host must route the prefix to itself
	// as local (`ip -6 route add local PREFIX dev lo`) for replies to
	// arrive. A custom DialContext finds the address with [DialSource].
	// Plain HTTP requests then get an upstream connection each (no
	// keep-alive pool shared between sessions). Excludes SourceAddr.
	ExitRanges []netip.Prefix

	// AllowCIDRs and DenyCIDRs adjust the egress guard: by default every
	// internal range is refused (DefaultEgressDenyRules: loopback, RFC
	// 1918, link-local and the metadata servers, CGNAT, multicast, the IPv6
	// equivalents and more). Of the allow and deny ranges containing an
	// address the most specific decides (deny wins a tie); a metadata
	// server yields only to an allow range at least as specific as its
	// own. Refusals are answered 403 naming the rule.
	AllowCIDRs []netip.Prefix
	DenyCIDRs  []netip.Prefix

	// Resolver resolves target names; every address of a name is checked
	// by the egress guard before one of them is dialled. Default:
	// net.DefaultResolver. Tests use it to make names resolve to internal
	// addresses.
	Resolver Resolver

	// LeaseKeys, when set, make the proxy check lease credentials
	// (pkg/leasecred): a password signed with one of them for the username
	// presented, naming a lease and its end, admits that username (its
	// session term too, so a session's exit) until the end, unless the
	// operator pushed that the lease ended (POST leasecred.PushPath, signed
	// with one of the keys). Connections and tunnels opened under a lease
	// are closed when it ends (when served by Serve). Username and
	// Password then admit only that username, and nothing on a proxy with
	// ExitRanges; answers to them name the keys' IDs (LeaseKeysHeader).
	// See docs/api.md, "What a lease guarantees".
	LeaseKeys []leasecred.Key

	// Logger receives the Server's logs. The zero value means
	// klog.Background(); use logr.Discard() for silence.
	Logger klog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if strings.ContainsAny(c.Name, " \t,;\r\n()") {
		return c, fmt.Errorf("forwardproxy: name %q must be a single token", c.Name)
	}
	if (c.Username != "") != (c.Password != "") {
		return c, errors.New("forwardproxy: username and password must be set together")
	}
	if strings.Contains(c.Username, ":") {
		return c, errors.New("forwardproxy: username must not contain ':'")
	}
	if c.MaxConns < 0 {
		return c, fmt.Errorf("forwardproxy: max conns %d must not be negative", c.MaxConns)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"read header timeout", &c.ReadHeaderTimeout, DefaultReadHeaderTimeout},
		{"idle timeout", &c.IdleTimeout, DefaultIdleTimeout},
		{"dial timeout", &c.DialTimeout, DefaultDialTimeout},
	} {
		if *d.v < 0 {
			return c, fmt.Errorf("forwardproxy: %s %v must not be negative", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if err := checkExitRanges(c.ExitRanges); err != nil {
		return c, err
	}
	if len(c.ExitRanges) > 0 && c.SourceAddr.IsValid() {
		return c, errors.New("forwardproxy: set exit ranges or a source address, not both")
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	if c.Logger.GetSink() == nil {
		c.Logger = klog.Background()
	}
	return c, nil
}
