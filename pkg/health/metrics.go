package health

import (
	"time"

	"k8s.io/client-go/tools/cache"
)

// Probe results, the label values of Metrics.ObserveProbe: a small, fixed
// set so that dashboards can pre-declare them.
const (
	// ResultSuccess: no error and the expected status.
	ResultSuccess = "success"
	// ResultTimeout: the probe did not finish within the timeout.
	ResultTimeout = "timeout"
	// ResultConnectError: the proxy could not be reached (refused, unreachable).
	ResultConnectError = "connect_error"
	// ResultProxyRefused: the proxy answered with an error of its own, such
	// as 407 to CONNECT or to a plain request.
	ResultProxyRefused = "proxy_refused"
	// ResultTLSError: a TLS handshake (with the target, or an https proxy) failed.
	ResultTLSError = "tls_error"
	// ResultUnexpectedStatus: the response came, with another status than expected.
	ResultUnexpectedStatus = "unexpected_status"
	// ResultError: anything else (a closed connection, unreadable credentials).
	ResultError = "error"
	// ResultOpen: a Managed instance answered without credentials too, so
	// anyone who can reach it could use it; it is never Ready (docs/decisions/0140-managed-instance-must-refuse-request-without.md).
	ResultOpen = "open"
)

// Reports lists why a verdict is reported, the label values of
// Metrics.ObserveReport.
var Reports = []string{reportFirstVerdict, reportFlip, reportLatency, reportLease}

// Results lists every probe result, for pre-declaring metric series.
var Results = []string{
	ResultSuccess, ResultTimeout, ResultConnectError, ResultProxyRefused,
	ResultTLSError, ResultUnexpectedStatus, ResultError, ResultOpen,
}

// Metrics receives the engine's measurements; pkg/metrics implements it.
// Calls come from the scheduler and from many workers at once.
type Metrics interface {
	// ObserveProbe records one finished probe of a proxy: its result (one of
	// Results), how long it took, and when it started. The start time per
	// proxy is the true probe recency: status.lastHealthCheckTime moves only
	// when a verdict is reported.
	ObserveProbe(key cache.ObjectName, result string, duration time.Duration, started time.Time)
	// SetConsecutiveFailures records the proxy's current run of failed probes.
	SetConsecutiveFailures(key cache.ObjectName, failures int)
	// ForgetProxy drops the per-proxy series of a proxy the engine stopped
	// probing (deleted, deleting, lost its address, or replaced).
	ForgetProxy(key cache.ObjectName)
	// SetProxiesByVerdict records, after every tick, how many probed proxies
	// are healthy, unhealthy, or have no verdict yet.
	SetProxiesByVerdict(healthy, unhealthy, unknown int)
	// ObserveScheduleDelay records how long after its due time a probe
	// started. It is below Tick while the pool keeps up.
	ObserveScheduleDelay(delay time.Duration)
	// ProbeDispatchSkipped counts a due probe that found the pool saturated
	// (every worker busy and the queue full); it is retried at the next tick.
	ProbeDispatchSkipped()
	// ObserveReport counts a verdict reported to the controller (each one
	// a status write), by why: one of Reports.
	ObserveReport(why string)
}

// NoMetrics discards every measurement.
type NoMetrics struct{}

func (NoMetrics) ObserveProbe(cache.ObjectName, string, time.Duration, time.Time) {}
func (NoMetrics) SetConsecutiveFailures(cache.ObjectName, int)                    {}
func (NoMetrics) ForgetProxy(cache.ObjectName)                                    {}
func (NoMetrics) SetProxiesByVerdict(int, int, int)                               {}
func (NoMetrics) ObserveScheduleDelay(time.Duration)                              {}
func (NoMetrics) ProbeDispatchSkipped()                                           {}
func (NoMetrics) ObserveReport(string)                                            {}
