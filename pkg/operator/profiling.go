package operator

import (
	"flag"
)

// addProfilingFlags binds --profiling (issue 16).
func (o *Options) addProfilingFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Serve Go's profiles (/debug/pprof/) beside /metrics on --metrics-addr. Off by default: a heap or CPU profile costs the leader CPU while it is taken, and the address is often reachable by more than the operator's admins.")
}
