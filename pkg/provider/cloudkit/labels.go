package cloudkit

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"regexp"
	"strconv"

	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// The labels the kit writes besides provider.Tags. Their keys are the aws
// provider's tag keys, so a cloud's console shows the same names.
const (
	// LabelClusterID scopes every instance to the operator's cluster, so
	// that two clusters sharing a project or account never collect or adopt
	// each other's instances.
	LabelClusterID = "crawl.proxyfleet.io/cluster-id"
	// LabelSpecHash records the spec hash the instance was built from.
	LabelSpecHash = "crawl.proxyfleet.io/spec-hash"
	// LabelPort records the proxy port, which Get reports.
	LabelPort = "crawl.proxyfleet.io/proxy-port"
)

// Labels are the labels of a create request's instance: the request's tags
// (provider.Tags), the cluster ID, the spec hash and the proxy port. A tag
// whose value is no valid label value (a Proxy name over 63 characters) is
// left out: pkg/gc needs only the managed-by and UID tags, which always fit.
func Labels(req provider.CreateRequest, clusterID string, port int32) map[string]string {
	labels := map[string]string{}
	for k, v := range req.Tags {
		if validLabelValue.MatchString(v) {
			labels[k] = v
		}
	}
	labels[LabelClusterID] = clusterID
	labels[LabelPort] = strconv.Itoa(int(port))
	if req.SpecHash != "" {
		labels[LabelSpecHash] = req.SpecHash
	}
	return labels
}

// validLabelValue is a Kubernetes label value, which Hetzner, GCE (lower
// case) and most clouds accept as a tag value.
var validLabelValue = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`)

// Owned reports whether an instance with these labels is this cluster's.
// Another cluster's instance does not exist for this one: never adopted,
// never deleted, never listed.
func Owned(labels map[string]string, clusterID string) bool {
	return clusterID != "" && labels[LabelClusterID] == clusterID
}

// ProxyTags are an instance's labels without the kit's own: the tags the
// provider was asked to set (provider.Instance.Tags).
func ProxyTags(labels map[string]string) map[string]string {
	tags := maps.Clone(labels)
	if tags == nil {
		tags = map[string]string{}
	}
	delete(tags, LabelClusterID)
	delete(tags, LabelSpecHash)
	delete(tags, LabelPort)
	delete(tags, LabelExitRange)
	return tags
}

// IdempotencyKey identifies one create: the cluster, the Proxy (its
// instance name, from its UID) and the spec. Two creates with the same key
// must end on the same instance; a spec change is a new key, so the
// replacement is a new instance beside the old one until the controller
// deletes that.
func IdempotencyKey(req provider.CreateRequest, clusterID string) string {
	sum := sha256.Sum256([]byte(clusterID + "\x00" + req.Name + "\x00" + req.SpecHash))
	return hex.EncodeToString(sum[:])
}

// InstanceName is the name of the create's instance, for clouds whose
// names are unique (Hetzner's per project): the request's name and 8 hex
// digits of its idempotency key, 28 characters, DNS-safe. Creating it twice
// fails on the name, which is how such a cloud makes a create idempotent.
func InstanceName(req provider.CreateRequest, clusterID string) string {
	return req.Name + "-" + IdempotencyKey(req, clusterID)[:8]
}

// PortOf is the proxy port LabelPort records in labels, or def when it
// records none or no valid port.
func PortOf(labels map[string]string, def int32) int32 {
	if p, err := strconv.ParseInt(labels[LabelPort], 10, 32); err == nil && p > 0 && p < 65536 {
		return int32(p)
	}
	return def
}
