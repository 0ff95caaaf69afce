package cloudkit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// AllowFromKey is the key of the firewall (security group) a provider owns
// to admit port from cidrs, within scope (the cluster ID, then whatever
// else bounds a firewall on that cloud, such as an AWS VPC): the same
// settings share one firewall, other settings get another, so a changed
// allowFrom moves instances onto a new one and the old one is swept. The
// order of cidrs does not matter. 16 hex digits; it is pure.
func AllowFromKey(port int32, cidrs []crawlv1alpha1.CIDR, scope ...string) string {
	sorted := make([]string, len(cidrs))
	for i, c := range cidrs {
		sorted[i] = string(c)
	}
	slices.Sort(sorted)
	h := sha256.New()
	for _, s := range scope {
		fmt.Fprintf(h, "%s\x00", s)
	}
	fmt.Fprintf(h, "%d", port)
	for _, c := range sorted {
		fmt.Fprintf(h, "\x00%s", c)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
