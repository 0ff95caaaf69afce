package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/gatewaycmd"
	"github.com/proxyfleet/proxy-operator/pkg/operator"
)

// runGateway is `proxy-operator gateway [flags]`: one gateway-tier replica.
// Exit codes as the operator's: 0 after a requested shutdown, 1 on failure,
// 2 for bad flags.
func runGateway(args []string) int {
	opts := gatewaycmd.DefaultOptions()
	fs := gatewaycmd.NewFlagSet(&opts)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	defer klog.Flush()
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "proxy-operator gateway: unexpected arguments %q: every setting is a flag (see -help)\n", fs.Args())
		return 2
	}
	if err := refuseBodyDumps(fs); err != nil {
		fmt.Fprintf(os.Stderr, "proxy-operator gateway: invalid flags: %v\n", err)
		return 2
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "proxy-operator gateway: invalid flags:\n%v\n", err)
		return 2
	}
	ctx, stop := signalContext()
	defer stop()
	if err := gatewaycmd.Run(ctx, opts, operator.Version()); err != nil {
		klog.Background().Error(err, "proxy-operator gateway failed")
		return 1
	}
	return 0
}
