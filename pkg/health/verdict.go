package health

import "time"

// Verdict is what the engine reports of a proxy and the controller writes
// into its Healthy condition (the controller's HealthSource returns it). It
// lives here, with the engine that makes it, so that the controller depends
// on health and never the other way round.
type Verdict struct {
	// Address is the host:port the verdict was measured against.
	Address string
	Healthy bool
	// Message says why in a few words; it never holds a credential.
	Message string
	Latency time.Duration
	// ExitIP is the address the health check's target saw (healthCheck.exitIPFromBody), "" if not measured.
	ExitIP string
	// ExitCountry is ExitIP's ISO 3166-1 alpha-2 country, "" if unknown.
	ExitCountry string
	// CheckedAt is when the probe behind this verdict ran.
	CheckedAt time.Time
	// Lease says whether the instance checks lease credentials, as the
	// latest successful probe found; LeaseUnknown when not healthy.
	Lease LeaseCheck
}

// LeaseCheck is whether a proxy's instance checks lease credentials
// (pkg/leasecred): the controller's LeaseBound condition, whose reason is
// its value (so that a new leader seeds it from the status, seedFromStatus).
type LeaseCheck string

const (
	// LeaseUnknown: not measured.
	LeaseUnknown LeaseCheck = ""
	// LeaseChecked: the instance named the signing key of its credentials
	// Secret in its answer (leasecred.KeysHeader): a lease's credentials
	// admit only while the lease lives.
	LeaseChecked LeaseCheck = "InstanceChecksLeases"
	// LeaseNoKey: the credentials Secret holds no lease-key (or the proxy
	// takes no credentials): leases are advisory.
	LeaseNoKey LeaseCheck = "NoLeaseKey"
	// LeaseNotChecked: the instance did not name the key (it does not run
	// our forward-proxy with it: squid, a proxy network): leases are
	// advisory.
	LeaseNotChecked LeaseCheck = "InstanceDoesNotCheck"
)

// LeaseChecks lists the measured LeaseCheck values.
var LeaseChecks = []LeaseCheck{LeaseChecked, LeaseNoKey, LeaseNotChecked}
