// Package forwardproxy is a small forward HTTP(S) proxy for crawler egress.
//
// It is the proxy that runs inside every managed instance of proxy-operator
// (the default image of Pod instances, the process behind the local provider)
// and a peer in tests. A [Server] is an [net/http.Handler] that also knows how
// to serve a listener and shut down gracefully:
//
//	srv, err := forwardproxy.New(forwardproxy.Config{Name: "px-1", Username: u, Password: p})
//	ln, _ := net.Listen("tcp", ":3128")
//	go srv.Serve(ln)
//	...
//	srv.Shutdown(ctx)
//
// What it is:
//
//   - CONNECT tunnelling for HTTPS (and anything else over TCP): the target is
//     dialled with a dial timeout, the client gets "200 Connection
//     Established", bytes are copied in both directions with half-close, and a
//     tunnel with no traffic in either direction for the idle timeout is
//     closed.
//   - Forwarding of absolute-URI http:// requests (RFC 9112 §3.2.2): hop-by-hop
//     headers are removed in both directions, a Via header is added in both
//     directions, X-Forwarded-For is added only when asked for (off by default:
//     crawlers do not want to leak their origin). Transport errors become 502,
//     a dial timeout 504, each with a short text/plain body.
//   - Optional basic authentication (RFC 7617) compared in constant time; 407
//     with Proxy-Authenticate: Basic realm="proxy" when missing or wrong.
//     Credentials are never logged.
//   - An egress guard (modelled on Stripe's Smokescreen): by default every
//     internal destination is refused with a 403 naming the rule (loopback,
//     RFC 1918, link-local and the cloud metadata servers, CGNAT, multicast,
//     unspecified, reserved and documentation ranges, the IPv6 equivalents,
//     IPv4-mapped forms, and IPv6 forms that embed an IPv4 address). It
//     decides on the addresses actually dialled: names are resolved through
//     [Config.Resolver], every address is checked, and only the checked IP
//     literals reach [Config.DialContext], for CONNECT and plain HTTP alike,
//     so DNS rebinding does not pass. [Config.AllowCIDRs] and
//     [Config.DenyCIDRs] (--allow-cidr, --deny-cidr) adjust it; see
//     [EgressPolicy]. Refusals are counted by rule in
//     forward_proxy_egress_refused_total, served at GET /metrics.
//   - Exit ranges ([Config.ExitRanges], --exit-range): targets are dialled
//     from an address of routed prefixes, picked by the username's
//     "+session-<id>" term ([SplitSession], [ExitAddr]): the same session,
//     the same address; none, a fresh one per connection. See
//     docs/ipv6.md.
//   - Lease credentials ([Config.LeaseKeys], --lease-key-file): a password
//     the lease API signed with the instance's key (pkg/leasecred) admits
//     its username, session term included, until its lease's end; a
//     lease the operator says ended (a signed POST to
//     leasecred.PushPath) is refused from then on, and the client
//     connections and tunnels opened under a lease are closed when it
//     ends. The static credentials then admit only the bare username,
//     and nothing on a proxy with exit ranges. See docs/api.md.
//   - Limits: concurrent client connections (enforced by [Server.Serve]),
//     read-header, idle and dial timeouts.
//   - GET /healthz addressed to the proxy itself (origin-form) answers 200
//     "ok" without authentication, GET /metrics the Prometheus metrics,
//     POST /lease-updates takes the operator's pushes (signed); any other
//     origin-form request is a 400.
//   - Graceful shutdown that waits for in-flight requests and open tunnels
//     until the context ends, then closes them.
//
// What it is not: a caching proxy, a TLS-intercepting (MITM) proxy, a reverse
// proxy, a SOCKS proxy, or an HTTP/2 proxy. It does not originate TLS for
// absolute https:// URIs (clients use CONNECT), does not forward protocol
// upgrades (Upgrade is hop-by-hop and removed), has no access-control lists
// by host name (the guard works on addresses), and no per-destination port
// allow-list. It never
// consults HTTP_PROXY and friends for its own outbound connections.
//
// Logging uses the klog/logr logger in [Config.Logger] (klog's global logger
// by default): start-up and errors at level 0, refused requests and upstream
// failures at -v=2, one line per request or tunnel at -v=3. Header values and
// credentials never appear in logs; the tests check this.
package forwardproxy
