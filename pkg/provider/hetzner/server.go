package hetzner

import (
	"errors"
	"strconv"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// Defaults for a spec.hetzner that the API server did not default; they
// match the CRD's.
const (
	DefaultServerType = "cx22"
	DefaultImage      = "debian-12"
	DefaultPort       = 3128
)

// MaxUserData is Hetzner's limit on a server's user-data.
const MaxUserData = 32 * 1024

// settings is a create's spec.hetzner with the defaults filled in.
type settings struct {
	location    string
	serverTypes []string
	image       string
	firewallIDs []int64
	allowFrom   []crawlv1alpha1.CIDR
	ipv6        bool
	exitRange   bool
	port        int32
}

// settingsOf is spec.hetzner of proxy with its defaults; location falls
// back to the operator's. It is pure. Errors name the field.
func settingsOf(proxy *crawlv1alpha1.Proxy, defaultLocation string) (settings, error) {
	spec := crawlv1alpha1.HetznerProvider{}
	if proxy.Spec.Hetzner != nil {
		spec = *proxy.Spec.Hetzner
	}
	s := settings{
		location: spec.Location, serverTypes: spec.ServerTypes, image: spec.Image,
		firewallIDs: spec.FirewallIDs, allowFrom: spec.AllowFrom, ipv6: spec.PublicIPv6, exitRange: spec.IPv6ExitRange, port: port(proxy),
	}
	if len(s.allowFrom) > 0 && len(s.firewallIDs) > 0 {
		return settings{}, errors.New("spec.hetzner.allowFrom and spec.hetzner.firewallIDs are exclusive: the operator's own firewall, or yours")
	}
	if s.exitRange && !s.ipv6 {
		return settings{}, errors.New("spec.hetzner.ipv6ExitRange needs spec.hetzner.publicIPv6: the exit range is the server's public IPv6 /64")
	}
	if s.location == "" {
		s.location = defaultLocation
	}
	if s.location == "" {
		return settings{}, errors.New("no location: set spec.hetzner.location or the operator's --hetzner-location")
	}
	if len(s.serverTypes) == 0 {
		s.serverTypes = []string{DefaultServerType}
	}
	if s.image == "" {
		s.image = DefaultImage
	}
	return s, nil
}

// exitRangeBoot finds the server's /64 at boot as the kernel's on-link
// route of it (cloud-init configures <prefix>::1/64 from Hetzner's network
// config), and answers the router's neighbour solicitations for it with
// ndppd: Hetzner's router asks for each address of the /64 on the link
// (docs/decisions/0311-hetzner-exit-range-ndppd.md).
var exitRangeBoot = cloudkit.ExitRangeBoot{
	Discover: `ip -6 route show proto kernel | awk '$1 ~ /\/64$/ && $1 !~ /^fe80:/ { print $1 }'`,
	NDP:      true,
}

// userDataOptions are the kit's additions to the server's user-data.
func userDataOptions(s settings) []cloudkit.UserDataOption {
	if !s.exitRange {
		return nil
	}
	return []cloudkit.UserDataOption{cloudkit.WithExitRange(exitRangeBoot)}
}

// serverLabels are the server's labels: the kit's, and the exit-range mark.
func serverLabels(req provider.CreateRequest, clusterID string, s settings) map[string]string {
	l := cloudkit.Labels(req, clusterID, s.port)
	if s.exitRange {
		l[cloudkit.LabelExitRange] = cloudkit.ExitRangeIPv6
	}
	return l
}

// proxyTags are a server's labels without the kit's and the firewall's.
func proxyTags(labels map[string]string) map[string]string {
	tags := cloudkit.ProxyTags(labels)
	delete(tags, LabelFirewall)
	return tags
}

// port is spec.hetzner.port, or DefaultPort.
func port(p *crawlv1alpha1.Proxy) int32 {
	if p.Spec.Hetzner != nil && p.Spec.Hetzner.Port != 0 {
		return p.Spec.Hetzner.Port
	}
	return DefaultPort
}

// createOpts is the request that creates the server of a create on
// serverType. It is pure. No SSH key: cloud-init configures the server,
// nobody logs in (docs/hetzner.md).
func createOpts(name string, labels map[string]string, userData []byte, s settings, serverType string) hcloud.ServerCreateOpts {
	opts := hcloud.ServerCreateOpts{
		Name:       name,
		ServerType: &hcloud.ServerType{Name: serverType},
		Image:      imageRef(s.image),
		Location:   &hcloud.Location{Name: s.location},
		UserData:   string(userData),
		Labels:     labels,
		PublicNet:  &hcloud.ServerCreatePublicNet{EnableIPv4: true, EnableIPv6: s.ipv6},
	}
	for _, id := range s.firewallIDs {
		opts.Firewalls = append(opts.Firewalls, &hcloud.ServerCreateFirewall{Firewall: hcloud.Firewall{ID: id}})
	}
	return opts
}

// imageRef is an image by ID when the spec names one by number, by name
// otherwise.
func imageRef(image string) *hcloud.Image {
	if id, err := strconv.ParseInt(image, 10, 64); err == nil {
		return &hcloud.Image{ID: id}
	}
	return &hcloud.Image{Name: image}
}

// instanceID is a server's provider instance ID: its numeric ID.
func instanceID(s *hcloud.Server) string { return strconv.FormatInt(s.ID, 10) }

// toInstance is the provider's view of a server. It is pure.
func toInstance(s *hcloud.Server) provider.Instance {
	inst := provider.Instance{
		ID:        instanceID(s),
		Tags:      proxyTags(s.Labels),
		SpecHash:  s.Labels[cloudkit.LabelSpecHash],
		CreatedAt: s.Created,
	}
	if n := s.PublicNet.IPv6.Network; n != nil {
		inst.ExitRanges = cloudkit.ExitRanges(s.Labels, []string{n.String()})
	}
	switch s.Status {
	case hcloud.ServerStatusRunning:
		if ip := s.PublicNet.IPv4.IP; ip != nil && !ip.IsUnspecified() {
			inst.State, inst.IP, inst.Port = provider.StateRunning, ip.String(), cloudkit.PortOf(s.Labels, DefaultPort)
			return inst
		}
		inst.State, inst.Message = provider.StateProvisioning, "running, waiting for its public IPv4 address"
	case hcloud.ServerStatusInitializing, hcloud.ServerStatusStarting, "":
		inst.State, inst.Message = provider.StateProvisioning, string(s.Status)
	default: // off, stopping, deleting, rebuilding, migrating, unknown
		inst.State, inst.Message = provider.StateStopped, string(s.Status)
	}
	return inst
}
