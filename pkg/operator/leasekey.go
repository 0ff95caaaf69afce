package operator

// Names of the lease API's shared state in the leader-election namespace.
const (
	// LeaseKeySecret holds the key that signs lease IDs. Every replica must
	// share it so that a new leader can verify (and re-learn) the leases its
	// predecessor granted; the first replica to start creates it.
	LeaseKeySecret = "proxy-operator-lease-key"
	// LeaseHorizonConfigMap records how far ahead the leader may have
	// granted leases (the horizon), so a successor knows how long to
	// refuse grants. Its name keeps the old word "watermark" on purpose:
	// it is persisted in running clusters, and a new leader that read
	// only a renamed ConfigMap would miss the old leader's horizon during
	// a rolling upgrade and grant proxies that are still leased.
	LeaseHorizonConfigMap = "proxy-operator-lease-watermark"
)
