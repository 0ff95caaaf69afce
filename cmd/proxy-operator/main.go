// Command proxy-operator runs the Proxy controller, the health engine,
// orphan collection and the lease API against a Kubernetes cluster; with
// the subcommand gateway (gateway.go) it runs one replica of the gateway
// tier instead. All wiring lives in pkg/operator and pkg/gatewaycmd; this
// is flags, logging, signals and the exit code.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/operator"
)

func main() {
	os.Exit(run())
}

// Exit codes: 0 after a requested shutdown, 1 when the operator failed or
// lost the leader lease, 2 for bad flags.
func run() int {
	if len(os.Args) > 1 && os.Args[1] == "gateway" {
		return runGateway(os.Args[2:])
	}
	opts := operator.DefaultOptions()
	var showVersion bool
	fs := operator.NewFlagSet(&opts, &showVersion)
	_ = fs.Parse(os.Args[1:]) // ExitOnError: exits 2 on a bad flag, 0 after -help
	defer klog.Flush()

	if showVersion {
		fmt.Println("proxy-operator", operator.Version())
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "proxy-operator: unexpected arguments %q: every setting is a flag (see -help); the one subcommand, gateway, comes first\n", fs.Args())
		return 2
	}
	if err := refuseBodyDumps(fs); err != nil {
		fmt.Fprintf(os.Stderr, "proxy-operator: invalid flags: %v\n", err)
		return 2
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "proxy-operator: invalid flags:\n%v\n", err)
		return 2
	}

	ctx, stop := signalContext()
	defer stop()

	if err := operator.Run(ctx, opts); err != nil {
		klog.Background().Error(err, "proxy-operator failed")
		return 1
	}
	return 0
}

// maxVerbosity is the highest -v the operator accepts. From -v=8 client-go
// logs request and response bodies, and the bodies of Secrets (cloud-init,
// credentials) are Secret content: never logged, at any verbosity.
const maxVerbosity = 7

// signalContext ends at SIGINT or SIGTERM; a second signal kills at once
// instead of waiting for the drain.
func signalContext() (context.Context, func()) {
	signalled, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-signalled.Done()
		stop()
	}()
	return klog.NewContext(signalled, klog.Background()), stop
}

// refuseBodyDumps rejects -v and -vmodule levels at which client-go would
// log request bodies.
func refuseBodyDumps(fs *flag.FlagSet) error {
	if v := fs.Lookup("v"); v != nil {
		if level, err := strconv.Atoi(v.Value.String()); err == nil && level > maxVerbosity {
			return fmt.Errorf("-v=%d: the highest level is %d (above it client-go logs request bodies, Secrets included)", level, maxVerbosity)
		}
	}
	if vm := fs.Lookup("vmodule"); vm != nil && vm.Value.String() != "" {
		for _, entry := range strings.Split(vm.Value.String(), ",") {
			_, levelText, _ := strings.Cut(entry, "=")
			if level, err := strconv.Atoi(levelText); err == nil && level > maxVerbosity {
				return fmt.Errorf("-vmodule=%s: the highest level is %d (above it client-go logs request bodies, Secrets included)", entry, maxVerbosity)
			}
		}
	}
	return nil
}
