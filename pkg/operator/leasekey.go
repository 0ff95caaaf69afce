package operator

// Names of the lease API's shared state in the leader-election namespace.
const (
	// LeaseKeySecret holds the key that signs lease IDs. Every replica must
	// share it so that a new leader can verify (and re-learn) the leases its
	// predecessor granted; the first replica to start creates it.
	LeaseKeySecret = "proxy-operator-lease-key"
	// LeaseWatermarkConfigMap records how far ahead the leader may have
	// granted leases, so a successor knows how long to refuse grants.
	LeaseWatermarkConfigMap = "proxy-operator-lease-watermark"
)
