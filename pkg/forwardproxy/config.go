package forwardproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"k8s.io/klog/v2"
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
	// context it passes. Default: a net.Dialer with TCP keep-alives. Tests
	// use it to inject faults.
	DialContext func(ctx context.Context, network, address string) (net.Conn, error)

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
	if c.DialContext == nil {
		c.DialContext = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	}
	if c.Logger.GetSink() == nil {
		c.Logger = klog.Background()
	}
	return c, nil
}
