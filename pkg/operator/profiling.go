package operator

import (
	"flag"
	"net/http"
	"net/http/pprof"
)

// addProfilingFlags binds --profiling (issue 16).
func (o *Options) addProfilingFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Serve Go's profiles (/debug/pprof/) beside /metrics on --metrics-addr. Off by default: a heap or CPU profile costs the leader CPU while it is taken, and the address is often reachable by more than the operator's admins.")
}

// registerProfiling adds /debug/pprof/ to the metrics server's mux. The
// handlers are registered by hand, not through net/http/pprof's init into
// http.DefaultServeMux, which nothing here serves.
func registerProfiling(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
