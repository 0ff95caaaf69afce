package operator

import (
	"flag"

	"k8s.io/klog/v2"
)

// NewFlagSet is proxy-operator's command line: klog's flags, opts' and
// -version (into showVersion). cmd/proxy-operator parses it; the docs test
// (docs/docs_test.go) lists it, to check every flag the docs name.
func NewFlagSet(opts *Options, showVersion *bool) *flag.FlagSet {
	fs := flag.NewFlagSet("proxy-operator", flag.ExitOnError)
	klog.InitFlags(fs)
	opts.AddFlags(fs)
	fs.BoolVar(showVersion, "version", false, "Print the version and exit.")
	return fs
}
