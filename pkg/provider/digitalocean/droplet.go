package digitalocean

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/digitalocean/godo"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// Defaults for a spec.digitalocean that the API server did not default;
// they match the CRD's.
const (
	DefaultSize  = "s-1vcpu-512mb-10gb"
	DefaultImage = "debian-12-x64"
	DefaultPort  = 3128
)

// MaxUserData is DigitalOcean's limit on a droplet's user-data.
const MaxUserData = 64 * 1024

// keyTagName is the flat tag name of a create's idempotency key
// (cloudkit.IdempotencyKey, 32 hex digits of it): "pxo:key:<hex>".
const keyTagName = "crawl.proxyfleet.io/key"

// settings is a create's spec.digitalocean with the defaults filled in.
type settings struct {
	region    string
	sizes     []string
	image     string
	tags      []string
	allowFrom []crawlv1alpha1.CIDR
	vpc       string
	ipv6      bool
	port      int32
}

// settingsOf is spec.digitalocean of proxy with its defaults; region
// falls back to the operator's. It is pure. Errors name the field.
func settingsOf(proxy *crawlv1alpha1.Proxy, defaultRegion string) (settings, error) {
	spec := crawlv1alpha1.DigitalOceanProvider{}
	if proxy.Spec.DigitalOcean != nil {
		spec = *proxy.Spec.DigitalOcean
	}
	s := settings{region: spec.Region, sizes: spec.Sizes, image: spec.Image, tags: spec.Tags, allowFrom: spec.AllowFrom, vpc: spec.VPCUUID, ipv6: spec.IPv6, port: spec.Port}
	if s.region == "" {
		s.region = defaultRegion
	}
	if s.region == "" {
		return settings{}, errors.New("no region: set spec.digitalocean.region or the operator's --digitalocean-region")
	}
	for i, tag := range s.tags {
		if strings.HasPrefix(tag, cloudkit.FlatTagPrefix) {
			return settings{}, errors.New("spec.digitalocean.tags[" + strconv.Itoa(i) + "]: tags starting with " + cloudkit.FlatTagPrefix + " are the operator's own")
		}
	}
	if len(s.sizes) == 0 {
		s.sizes = []string{DefaultSize}
	}
	if s.image == "" {
		s.image = DefaultImage
	}
	if s.port == 0 {
		s.port = DefaultPort
	}
	return s, nil
}

// dropletTags are the tags of a create's droplet: its labels as flat
// tags, the idempotency key's tag and the spec's own tags, sorted.
func dropletTags(labels map[string]string, keyTag string, s settings) []string {
	tags := append(cloudkit.FlatTags(labels), keyTag)
	tags = append(tags, s.tags...)
	slices.Sort(tags)
	return slices.Compact(tags)
}

// createRequest is the request that creates a create's droplet of size.
// It is pure. No SSH key: cloud-init configures the droplet, nobody logs
// in (docs/digitalocean.md).
func createRequest(name string, tags []string, userData []byte, s settings, size string) *godo.DropletCreateRequest {
	return &godo.DropletCreateRequest{
		Name: name, Region: s.region, Size: size, Image: imageRef(s.image),
		IPv6: s.ipv6, UserData: string(userData), Tags: tags, VPCUUID: s.vpc,
	}
}

// imageRef is an image by ID when the spec names one by number, by slug
// otherwise.
func imageRef(image string) godo.DropletCreateImage {
	if id, err := strconv.Atoi(image); err == nil {
		return godo.DropletCreateImage{ID: id}
	}
	return godo.DropletCreateImage{Slug: image}
}

// toInstance is the provider's view of a droplet. It is pure.
func toInstance(d *godo.Droplet) provider.Instance {
	labels := cloudkit.LabelsOfFlatTags(d.Tags)
	delete(labels, keyTagName)
	delete(labels, firewallTagName)
	inst := provider.Instance{
		ID:       strconv.Itoa(d.ID),
		Tags:     cloudkit.ProxyTags(labels),
		SpecHash: labels[cloudkit.LabelSpecHash],
	}
	inst.CreatedAt, _ = time.Parse(time.RFC3339, d.Created)
	switch d.Status {
	case "active":
		if ip, _ := d.PublicIPv4(); ip != "" {
			inst.State, inst.IP, inst.Port = provider.StateRunning, ip, cloudkit.PortOf(labels, DefaultPort)
			return inst
		}
		inst.State, inst.Message = provider.StateProvisioning, "active, waiting for its public IPv4 address"
	case "new", "":
		inst.State, inst.Message = provider.StateProvisioning, "new"
	default: // off, archive
		inst.State, inst.Message = provider.StateStopped, d.Status
	}
	return inst
}
