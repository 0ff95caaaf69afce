package metrics

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Gateway is the gateway's metrics (pkg/gateway.Metrics), which a
// gateway-tier replica serves on a registry of its own (NewGateway).
type Gateway struct {
	connections *prometheus.CounterVec
	active      prometheus.Gauge
	bytes       *prometheus.CounterVec
	sessions    prometheus.Gauge
	errors      *prometheus.CounterVec

	// The children every tunnel touches, looked up once: WithLabelValues
	// hashes the labels and takes the vector's lock on every call.
	connectByMode map[string]prometheus.Counter
	errorByReason map[string]prometheus.Counter
	bytesByPool   sync.Map // bytesKey -> prometheus.Counter
}

// bytesKey names one child of gateway_bytes_total.
type bytesKey struct{ direction, namespace, pool string }

// GatewayLabels are the gateway's label values (pkg/gateway's Modes,
// Directions and ErrorReasons), predeclared as Labels are.
type GatewayLabels struct {
	Modes, Directions, ErrorReasons []string
}

func newGatewayMetrics(labels GatewayLabels) *Gateway {
	g := &Gateway{
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "gateway_connections_total",
			Help:      "CONNECT tunnels and plain-HTTP requests the gateway chained through a leased upstream, by mode (session, rotating) and method.",
		}, []string{"mode", "method"}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "gateway_connections_active",
			Help:      "Open gateway tunnels and plain-HTTP requests in flight.",
		}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "gateway_bytes_total",
			Help:      "Bytes the gateway moved, by direction (up: client to upstream, down: upstream to client) and by the leased proxy's namespace and pool (pool empty for a proxy of no pool): proxy networks bill per GB. Tunnels add in chunks of up to 4 MiB.",
		}, []string{"direction", "namespace", "pool"}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "gateway_sessions",
			Help:      "Sticky sessions the gateway remembers (each holds at most one lease).",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "gateway_errors_total",
			Help:      "Gateway requests refused or failed, by reason: bad_username, bad_request, unauthenticated, forbidden, auth_unavailable, not_leader, none_free, unavailable, upstream_refused, upstream_failed.",
		}, []string{"reason"}),
	}
	g.connectByMode = map[string]prometheus.Counter{}
	for _, mode := range labels.Modes {
		g.connectByMode[mode] = g.connections.WithLabelValues(mode, "CONNECT")
	}
	// The family is exported from the start (for dashboards and the
	// metrics test), as a zero series without a namespace or pool.
	for _, d := range labels.Directions {
		g.bytes.WithLabelValues(d, "", "")
	}
	g.errorByReason = map[string]prometheus.Counter{}
	for _, r := range labels.ErrorReasons {
		g.errorByReason[r] = g.errors.WithLabelValues(r)
	}
	return g
}

func (g *Gateway) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.connections, g.active, g.bytes, g.sessions, g.errors}
}

// ObserveGatewayConnection counts a tunnel or plain request chained upstream.
func (g *Gateway) ObserveGatewayConnection(mode, method string) {
	if c, ok := g.connectByMode[mode]; ok && method == "CONNECT" {
		c.Inc()
		return
	}
	g.connections.WithLabelValues(mode, method).Inc()
}

// AddGatewayActive moves the open-connections gauge.
func (g *Gateway) AddGatewayActive(delta int) { g.active.Add(float64(delta)) }

// AddGatewayBytes counts bytes moved in one direction through a leased
// proxy of pool in namespace: the labels are as many as the pools.
func (g *Gateway) AddGatewayBytes(direction, namespace, pool string, n int64) {
	key := bytesKey{direction, namespace, pool}
	c, ok := g.bytesByPool.Load(key)
	if !ok {
		c, _ = g.bytesByPool.LoadOrStore(key, g.bytes.WithLabelValues(direction, namespace, pool))
	}
	c.(prometheus.Counter).Add(float64(n))
}

// SetGatewaySessions sets the sessions gauge.
func (g *Gateway) SetGatewaySessions(n int) { g.sessions.Set(float64(n)) }

// ObserveGatewayError counts a refusal or failure by reason.
func (g *Gateway) ObserveGatewayError(reason string) {
	if c, ok := g.errorByReason[reason]; ok {
		c.Inc()
		return
	}
	g.errors.WithLabelValues(reason).Inc()
}

// NewGateway returns a gateway's metrics on a registry of their own, with
// the build info, and its /metrics handler: what `proxy-operator gateway`
// serves, without the operator's metrics that it has no part in.
func NewGateway(version string, labels GatewayLabels) (*Gateway, http.Handler) {
	g := newGatewayMetrics(labels)
	registry := prometheus.NewRegistry()
	registry.MustRegister(g.collectors()...)
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace,
		Name:      "build_info",
		Help:      "Always 1; the version label says which build of the operator runs.",
	}, []string{"version"})
	info.WithLabelValues(version).Set(1)
	registry.MustRegister(info)
	return g, handlerFor(registry)
}
