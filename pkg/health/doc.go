// Package health is the health engine: it probes every Proxy through itself
// and keeps, per proxy, a verdict (healthy or unhealthy) that flips only at
// the spec's success and failure thresholds.
//
// An Engine runs on the leader only. Every Tick its scheduler lists the
// Proxies from the informer cache and hands the due ones to a bounded pool
// of workers; each worker runs Probe (a fresh connection every time, CONNECT
// and TLS for https targets) and records the result. The engine reports to
// the controller (Config.Enqueue) only on a first verdict, a flip, or a
// material latency change, rate-limited; the controller reads the reported
// snapshot through Verdict and writes it into status. So a steady fleet
// causes no API writes, and the time of the latest probe lives in metrics,
// not in status.
//
// It is not a status writer (pkg/controller is the only one), not a
// provider of instances, and it keeps no state across leaders: a new leader
// seeds its verdicts from the Healthy conditions it finds.
package health
