// Command forward-proxy is a small forward HTTP(S) proxy (CONNECT and plain
// HTTP, optional basic auth, /healthz); see package
// github.com/proxyfleet/proxy-operator/pkg/forwardproxy.
//
// Credentials come from the environment (PROXY_USERNAME, PROXY_PASSWORD) or
// from a file named by --auth-file holding "username:password", never from
// flags: argv is visible to every user of the machine.
//
// On SIGTERM or SIGINT it stops accepting connections and waits up to
// --shutdown-timeout for requests and tunnels in flight; a second signal
// exits at once.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
)

// version is set at link time by `make image` (hack/image): the VERSION tag
// plus the commit; "dev" for a plain go build.
var version = "dev"

const (
	envUsername = "PROXY_USERNAME"
	envPassword = "PROXY_PASSWORD"
)

func main() {
	os.Exit(run())
}

func run() int {
	klog.InitFlags(nil)
	var (
		listen                = flag.String("listen", ":3128", "address to listen on; host:0 picks a free port (see the \"listening\" log line)")
		name                  = flag.String("name", forwardproxy.DefaultName, "pseudonym in the Via header")
		maxConns              = flag.Int("max-conns", 1024, "maximum concurrent client connections (0: no limit); beyond it HTTP gets 503 and CONNECT is refused")
		readHeaderTimeout     = flag.Duration("read-header-timeout", forwardproxy.DefaultReadHeaderTimeout, "time allowed to read a request's headers")
		idleTimeout           = flag.Duration("idle-timeout", forwardproxy.DefaultIdleTimeout, "close keep-alive connections and tunnels idle this long")
		dialTimeout           = flag.Duration("dial-timeout", forwardproxy.DefaultDialTimeout, "time allowed to connect to a target (504 when exceeded)")
		xForwardedFor         = flag.Bool("x-forwarded-for", false, "add the client's IP to X-Forwarded-For on plain HTTP requests (leaks the crawler's origin)")
		authFile              = flag.String("auth-file", "", "file holding username:password for basic auth (alternative to $"+envUsername+"/$"+envPassword+")")
		cloudInit             = flag.String("cloud-init", "", "path of the cloud-init user-data delivered to this instance; its size and sha256 are logged, never its content")
		shutdownTimeout       = flag.Duration("shutdown-timeout", 25*time.Second, "on SIGTERM, how long to wait for requests and tunnels in flight")
		showVersion           = flag.Bool("version", false, "print the version and exit")
		allowCIDRs, denyCIDRs cidrList
	)
	flag.Var(&allowCIDRs, "allow-cidr", "admit destinations in this range, which the egress guard refuses by default (repeatable; e.g. 127.0.0.0/8). "+
		"The most specific --allow-cidr or --deny-cidr containing an address decides; metadata servers yield only to a range at least as specific as theirs")
	flag.Var(&denyCIDRs, "deny-cidr", "refuse destinations in this range, beside the internal ranges refused by default (repeatable)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: %s [flags]\n\nA forward HTTP(S) proxy. Basic-auth credentials come from $%s and $%s or --auth-file.\n\nFlags:\n", os.Args[0], envUsername, envPassword)
		flag.PrintDefaults()
	}
	flag.Parse()
	defer klog.Flush()
	if *showVersion {
		fmt.Println("forward-proxy", version)
		return 0
	}
	if flag.NArg() > 0 {
		klog.ErrorS(nil, "Unexpected arguments", "args", flag.Args())
		return 2
	}

	user, pass, err := credentials(*authFile, os.Getenv)
	if err != nil {
		klog.ErrorS(err, "Cannot load credentials")
		return 2
	}
	if *cloudInit != "" {
		size, sum, err := digestFile(*cloudInit)
		if err != nil {
			klog.ErrorS(err, "Cannot read cloud-init user-data", "path", *cloudInit)
			return 1
		}
		klog.InfoS("cloud-init user-data present", "path", *cloudInit, "bytes", size, "sha256", sum)
	}

	srv, err := forwardproxy.New(forwardproxy.Config{
		Name:              *name,
		Username:          user,
		Password:          pass,
		MaxConns:          *maxConns,
		ReadHeaderTimeout: *readHeaderTimeout,
		IdleTimeout:       *idleTimeout,
		DialTimeout:       *dialTimeout,
		XForwardedFor:     *xForwardedFor,
		AllowCIDRs:        allowCIDRs,
		DenyCIDRs:         denyCIDRs,
		Logger:            klog.Background(),
	})
	if err != nil {
		klog.ErrorS(err, "Invalid configuration")
		return 2
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		klog.ErrorS(err, "Cannot listen", "addr", *listen)
		return 1
	}
	klog.InfoS("Configuration", "name", *name, "auth", user != "", "maxConns", *maxConns,
		"readHeaderTimeout", *readHeaderTimeout, "idleTimeout", *idleTimeout, "dialTimeout", *dialTimeout,
		"xForwardedFor", *xForwardedFor, "allowCIDRs", allowCIDRs.String(), "denyCIDRs", denyCIDRs.String())
	klog.InfoS(forwardproxy.ListeningMessage, "addr", forwardproxy.LogAddr(ln.Addr().String()))

	return serveUntilSignal(srv, ln, *shutdownTimeout)
}

// serveUntilSignal serves on ln until SIGTERM or SIGINT, then shuts down
// gracefully within shutdownTimeout; it returns the process's exit code.
func serveUntilSignal(srv *forwardproxy.Server, ln net.Listener, shutdownTimeout time.Duration) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	select {
	case err := <-serveErr:
		klog.ErrorS(err, "Serving stopped")
		return 1
	case <-ctx.Done():
	}
	stop() // a second signal terminates at once
	st := srv.Stats()
	klog.InfoS("Shutting down", "timeout", shutdownTimeout, "conns", st.Conns, "tunnels", st.Tunnels)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		klog.InfoS("Shutdown deadline reached; closed remaining connections", "err", err)
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		klog.ErrorS(err, "Serving stopped")
		return 1
	}
	klog.InfoS("Shutdown complete")
	return 0
}

// credentials returns the basic-auth credentials from authFile or, when it is
// empty, from the environment. Neither source: no authentication.
func credentials(authFile string, getenv func(string) string) (user, pass string, err error) {
	envUser, envPass := getenv(envUsername), getenv(envPassword)
	if authFile != "" {
		if envUser != "" || envPass != "" {
			return "", "", fmt.Errorf("credentials given both in --auth-file and in $%s/$%s: use one", envUsername, envPassword)
		}
		data, err := os.ReadFile(authFile)
		if err != nil {
			return "", "", fmt.Errorf("reading --auth-file: %w", err) // the error names the path, not the content
		}
		line := strings.TrimRight(string(data), "\r\n")
		user, pass, ok := strings.Cut(line, ":")
		if !ok || user == "" || pass == "" || strings.ContainsAny(line, "\r\n") {
			return "", "", fmt.Errorf("--auth-file %s: want one line username:password", authFile)
		}
		return user, pass, nil
	}
	if (envUser == "") != (envPass == "") {
		return "", "", fmt.Errorf("set both $%s and $%s, or neither", envUsername, envPassword)
	}
	return envUser, envPass, nil
}

// cidrList is a repeatable flag of CIDR ranges (a bare address is a
// single-address range).
type cidrList []netip.Prefix

func (l *cidrList) String() string {
	parts := make([]string, len(*l))
	for i, p := range *l {
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}

func (l *cidrList) Set(v string) error {
	p, err := forwardproxy.ParseCIDR(v)
	if err != nil {
		return err
	}
	*l = append(*l, p)
	return nil
}

func digestFile(path string) (int, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, "", err
	}
	sum := sha256.Sum256(data)
	return len(data), hex.EncodeToString(sum[:]), nil
}
