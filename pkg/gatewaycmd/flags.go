package gatewaycmd

import (
	"flag"

	"k8s.io/klog/v2"
)

// NewFlagSet is `proxy-operator gateway`'s command line: klog's flags and
// opts'. cmd/proxy-operator parses it; the docs test (docs/docs_test.go)
// lists it, to check every flag the docs name.
func NewFlagSet(opts *Options) *flag.FlagSet {
	fs := flag.NewFlagSet("proxy-operator gateway", flag.ContinueOnError)
	klog.InitFlags(fs)
	opts.AddFlags(fs)
	return fs
}
