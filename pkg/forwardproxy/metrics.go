package forwardproxy

import (
	"fmt"
	"net/http"
	"net/netip"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsPath is where a Server answers origin-form GET requests with its
// Prometheus metrics (without authentication, like /healthz: they count
// refusals, never name a client, a target or a credential).
const MetricsPath = "/metrics"

// serverMetrics is one Server's private registry.
type serverMetrics struct {
	egressRefused *prometheus.CounterVec
	// Lease credentials (leases.go).
	leaseRefused       *prometheus.CounterVec
	leaseConnsClosed   prometheus.Counter
	leases             prometheus.Gauge
	pushes             *prometheus.CounterVec
	pushUpdatesDropped prometheus.Counter
	handler            http.Handler
}

func newServerMetrics() *serverMetrics {
	reg := prometheus.NewRegistry()
	m := &serverMetrics{
		egressRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forward_proxy_egress_refused_total",
			Help: "Dials the egress guard refused (answered 403), by the rule that refused them.",
		}, []string{"rule"}),
	}
	m.leaseRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forward_proxy_lease_refused_total",
		Help: "Lease credentials refused (answered 407), by reason: expired, ended (released or revoked, as the operator pushed), full.",
	}, []string{"reason"})
	m.leaseConnsClosed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "forward_proxy_lease_connections_closed_total",
		Help: "Client connections and tunnels closed because the lease they were opened under ended.",
	})
	m.leases = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "forward_proxy_leases",
		Help: "Leases the proxy keeps track of: those with credentials in use, and ended ones whose credentials have yet to expire.",
	})
	m.pushes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forward_proxy_lease_pushes_total",
		Help: "Pushes of lease updates from the operator, by result: ok, refused (bad signature or body).",
	}, []string{"result"})
	m.pushUpdatesDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "forward_proxy_lease_push_updates_dropped_total",
		Help: "Pushed lease ends not kept because the proxy tracks the most leases it will.",
	})
	reg.MustRegister(m.egressRefused, m.leaseRefused, m.leaseConnsClosed, m.leases, m.pushes, m.pushUpdatesDropped)
	for _, r := range []admitReason{refusedExpired, refusedEnded, refusedFull} {
		m.leaseRefused.WithLabelValues(string(r))
	}
	m.pushes.WithLabelValues("ok")
	m.pushes.WithLabelValues("refused")
	// Every rule is exported from the start, so that an alert on a rate
	// sees zeros rather than nothing.
	for _, r := range DefaultEgressDenyRules {
		m.egressRefused.WithLabelValues(r.Name)
	}
	m.egressRefused.WithLabelValues(RuleDenyCIDR)
	m.egressRefused.WithLabelValues(RuleNotGlobalUnicast)
	m.egressRefused.WithLabelValues(RuleExitRange)
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return m
}

// control checks a socket's address once more just before connect(2): the
// default dialer's second line of defence behind the check in dial.
func (p EgressPolicy) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("egress guard: cannot parse socket address %q: %w", address, err)
	}
	if v := p.Check(ap.Addr()); !v.Allowed {
		return &EgressRefusedError{Host: ap.Addr().String(), Verdict: v}
	}
	return nil
}
