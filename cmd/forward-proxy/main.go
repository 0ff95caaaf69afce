// Command forward-proxy is a small forward HTTP(S) proxy (CONNECT and plain
// HTTP, optional basic auth, /healthz); see package
// github.com/proxyfleet/proxy-operator/pkg/forwardproxy.
//
// Credentials come from the environment (PROXY_USERNAME, PROXY_PASSWORD) or
// from a file named by --auth-file holding "username:password", never from
// flags: argv is visible to every user of the machine. So do the lease keys
// (PROXY_LEASE_KEYS, or --lease-key-file), which make a lease's signed
// credentials admit only until the lease ends (docs/api.md).
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
	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
)

// version is set at link time by `make image` (hack/image): the VERSION tag
// plus the commit; "dev" for a plain go build.
var version = "dev"

const (
	envUsername  = "PROXY_USERNAME"
	envPassword  = "PROXY_PASSWORD"
	envLeaseKeys = "PROXY_LEASE_KEYS"
)

func main() {
	os.Exit(run())
}

func run() int {
	var c forwardproxy.CommandLine
	fs := forwardproxy.NewFlagSet(os.Args[0], &c, "$"+envUsername+"/$"+envPassword)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\nA forward HTTP(S) proxy. Basic-auth credentials come from $%s and $%s or --auth-file.\n\nFlags:\n", os.Args[0], envUsername, envPassword)
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:]) // ExitOnError: exits 2 on a bad flag, 0 after -help
	defer klog.Flush()
	if c.ShowVersion {
		fmt.Println("forward-proxy", version)
		return 0
	}
	if fs.NArg() > 0 {
		klog.ErrorS(nil, "Unexpected arguments", "args", fs.Args())
		return 2
	}

	user, pass, err := credentials(c.AuthFile, os.Getenv)
	if err != nil {
		klog.ErrorS(err, "Cannot load credentials")
		return 2
	}
	leaseKeys, err := leaseKeys(c.LeaseKeyFile, os.Getenv)
	if err != nil {
		klog.ErrorS(err, "Cannot load the lease keys")
		return 2
	}
	if c.CloudInit != "" {
		size, sum, err := digestFile(c.CloudInit)
		if err != nil {
			klog.ErrorS(err, "Cannot read cloud-init user-data", "path", c.CloudInit)
			return 1
		}
		klog.InfoS("cloud-init user-data present", "path", c.CloudInit, "bytes", size, "sha256", sum)
	}

	var source netip.Addr
	if c.SourceAddr != "" {
		if source, err = netip.ParseAddr(c.SourceAddr); err != nil {
			klog.ErrorS(err, "Invalid --source-addr", "value", c.SourceAddr)
			return 2
		}
	}
	srv, err := forwardproxy.New(forwardproxy.Config{
		Name:              c.Name,
		Username:          user,
		Password:          pass,
		MaxConns:          c.MaxConns,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
		DialTimeout:       c.DialTimeout,
		XForwardedFor:     c.XForwardedFor,
		AllowCIDRs:        c.AllowCIDRs,
		DenyCIDRs:         c.DenyCIDRs,
		SourceAddr:        source,
		ExitRanges:        c.ExitRanges,
		LeaseKeys:         leaseKeys,
		Logger:            klog.Background(),
	})
	if err != nil {
		klog.ErrorS(err, "Invalid configuration")
		return 2
	}

	if err := forwardproxy.CheckExitRanges(context.Background(), c.ExitRanges); err != nil {
		klog.ErrorS(err, "Cannot leave from the exit ranges")
		return 1
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		klog.ErrorS(err, "Cannot listen", "addr", c.Listen)
		return 1
	}
	klog.InfoS("Configuration", "name", c.Name, "auth", user != "", "maxConns", c.MaxConns,
		"readHeaderTimeout", c.ReadHeaderTimeout, "idleTimeout", c.IdleTimeout, "dialTimeout", c.DialTimeout,
		"xForwardedFor", c.XForwardedFor, "allowCIDRs", c.AllowCIDRs.String(), "denyCIDRs", c.DenyCIDRs.String(),
		"exitRanges", c.ExitRanges.String(), "leaseKeys", len(leaseKeys))
	klog.InfoS(forwardproxy.ListeningMessage, "addr", forwardproxy.LogAddr(ln.Addr().String()))

	return serveUntilSignal(srv, ln, c.ShutdownTimeout)
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

// leaseKeys returns the lease keys from keyFile or, when it is empty, from
// the environment; neither: none (lease credentials are not checked).
func leaseKeys(keyFile string, getenv func(string) string) ([]leasecred.Key, error) {
	text := getenv(envLeaseKeys)
	if keyFile != "" {
		if text != "" {
			return nil, fmt.Errorf("lease keys given both in --lease-key-file and in $%s: use one", envLeaseKeys)
		}
		data, err := os.ReadFile(keyFile)
		if err != nil {
			return nil, fmt.Errorf("reading --lease-key-file: %w", err)
		}
		text = string(data)
	}
	if strings.TrimSpace(text) == "" {
		if keyFile != "" {
			return nil, fmt.Errorf("--lease-key-file %s holds no key", keyFile)
		}
		return nil, nil
	}
	return leasecred.ParseKeys(text)
}

func digestFile(path string) (int, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, "", err
	}
	sum := sha256.Sum256(data)
	return len(data), hex.EncodeToString(sum[:]), nil
}
