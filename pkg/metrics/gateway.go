package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxyfleet/proxy-operator/pkg/gateway"
)

// gatewayMetrics are the gateway's (pkg/gateway.Metrics).
type gatewayMetrics struct {
	connections *prometheus.CounterVec
	active      prometheus.Gauge
	bytes       *prometheus.CounterVec
	sessions    prometheus.Gauge
	errors      *prometheus.CounterVec

	// The children every tunnel touches, looked up once: WithLabelValues
	// hashes the labels and takes the vector's lock on every call.
	connectByMode      map[string]prometheus.Counter
	bytesUp, bytesDown prometheus.Counter
	errorByReason      map[string]prometheus.Counter
}

func newGatewayMetrics() gatewayMetrics {
	g := gatewayMetrics{
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
			Help:      "Bytes the gateway moved, by direction: up (client to upstream) and down (upstream to client). Tunnels add in chunks of up to 4 MiB.",
		}, []string{"direction"}),
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
	for _, mode := range []string{gateway.ModeSession, gateway.ModeRotating} {
		g.connectByMode[mode] = g.connections.WithLabelValues(mode, "CONNECT")
	}
	g.bytesUp, g.bytesDown = g.bytes.WithLabelValues(gateway.DirectionUp), g.bytes.WithLabelValues(gateway.DirectionDown)
	g.errorByReason = map[string]prometheus.Counter{}
	for _, r := range gateway.ErrorReasons {
		g.errorByReason[r] = g.errors.WithLabelValues(r)
	}
	return g
}

func (g gatewayMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.connections, g.active, g.bytes, g.sessions, g.errors}
}

// ObserveGatewayConnection counts a tunnel or plain request chained upstream.
func (m *Metrics) ObserveGatewayConnection(mode, method string) {
	if c, ok := m.gw.connectByMode[mode]; ok && method == "CONNECT" {
		c.Inc()
		return
	}
	m.gw.connections.WithLabelValues(mode, method).Inc()
}

// AddGatewayActive moves the open-connections gauge.
func (m *Metrics) AddGatewayActive(delta int) { m.gw.active.Add(float64(delta)) }

// AddGatewayBytes counts bytes moved in one direction.
func (m *Metrics) AddGatewayBytes(direction string, n int64) {
	switch direction {
	case gateway.DirectionUp:
		m.gw.bytesUp.Add(float64(n))
	case gateway.DirectionDown:
		m.gw.bytesDown.Add(float64(n))
	default:
		m.gw.bytes.WithLabelValues(direction).Add(float64(n))
	}
}

// SetGatewaySessions sets the sessions gauge.
func (m *Metrics) SetGatewaySessions(n int) { m.gw.sessions.Set(float64(n)) }

// ObserveGatewayError counts a refusal or failure by reason.
func (m *Metrics) ObserveGatewayError(reason string) {
	if c, ok := m.gw.errorByReason[reason]; ok {
		c.Inc()
		return
	}
	m.gw.errors.WithLabelValues(reason).Inc()
}
