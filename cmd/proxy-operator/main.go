// Command proxy-operator runs the Proxy controller, the health engine,
// orphan collection and the lease API against a Kubernetes cluster. All wiring lives in pkg/operator; this is flags, logging, signals
// and the exit code.
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
	klog.InitFlags(flag.CommandLine)
	opts := operator.DefaultOptions()
	opts.AddFlags(flag.CommandLine)
	showVersion := flag.Bool("version", false, "Print the version and exit.")
	flag.Parse()
	defer klog.Flush()

	if *showVersion {
		fmt.Println("proxy-operator", operator.Version())
		return 0
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "proxy-operator: unexpected arguments %q: every setting is a flag (see -help)\n", flag.Args())
		return 2
	}
	if err := refuseBodyDumps(); err != nil {
		fmt.Fprintf(os.Stderr, "proxy-operator: invalid flags: %v\n", err)
		return 2
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "proxy-operator: invalid flags:\n%v\n", err)
		return 2
	}

	signalled, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-signalled.Done()
		stop() // a second signal kills at once instead of waiting for the drain
	}()
	ctx := klog.NewContext(signalled, klog.Background())

	providers := operator.BuiltinProviders()

	if err := operator.Run(ctx, opts, providers); err != nil {
		klog.Background().Error(err, "proxy-operator failed")
		return 1
	}
	return 0
}

// maxVerbosity is the highest -v the operator accepts. From -v=8 client-go
// logs request and response bodies, and the bodies of Secrets (cloud-init,
// credentials) are Secret content: never logged, at any verbosity.
const maxVerbosity = 7

// refuseBodyDumps rejects -v and -vmodule levels at which client-go would
// log request bodies.
func refuseBodyDumps() error {
	if v := flag.Lookup("v"); v != nil {
		if level, err := strconv.Atoi(v.Value.String()); err == nil && level > maxVerbosity {
			return fmt.Errorf("-v=%d: the highest level is %d (above it client-go logs request bodies, Secrets included)", level, maxVerbosity)
		}
	}
	if vm := flag.Lookup("vmodule"); vm != nil && vm.Value.String() != "" {
		for _, entry := range strings.Split(vm.Value.String(), ",") {
			_, levelText, _ := strings.Cut(entry, "=")
			if level, err := strconv.Atoi(levelText); err == nil && level > maxVerbosity {
				return fmt.Errorf("-vmodule=%s: the highest level is %d (above it client-go logs request bodies, Secrets included)", entry, maxVerbosity)
			}
		}
	}
	return nil
}
