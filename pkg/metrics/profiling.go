package metrics

import (
	"net/http"
	"net/http/pprof"
)

// RegisterProfiling adds /debug/pprof/ to a metrics server's mux (the
// operator's and the gateway's --profiling). The handlers are registered by
// hand, not through net/http/pprof's init into http.DefaultServeMux, which
// nothing here serves.
func RegisterProfiling(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
