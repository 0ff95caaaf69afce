package digitalocean

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/digitalocean/godo"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// firewallTagName is the flat tag name of spec.digitalocean.allowFrom's
// firewall ("pxo:firewall:<key>"): the firewall applies to the droplets
// carrying it (the aws provider's owned security group, on DigitalOcean:
// docs/decisions/0314-digitalocean-owned-firewall-by-tag.md).
const firewallTagName = "crawl.proxyfleet.io/firewall"

// firewallNamePrefix starts the name of every firewall this cluster owns:
// firewalls have no tags of their own, so the name is what Sweep scopes
// by. It holds the whole SHA-256 of the cluster ID: with 32 bits of it two
// clusters' prefixes could be the same, and one cluster's sweep would take
// the other's firewalls for its own
// (docs/decisions/0431-digitalocean-firewall-name-holds-the-whole-cluster-key.md).
func firewallNamePrefix(clusterID string) string {
	sum := sha256.Sum256([]byte(clusterID))
	return "pxo-" + hex.EncodeToString(sum[:]) + "-"
}

// legacyFirewallNamePrefix is the prefix operators before record 0431
// named this cluster's firewalls with: 32 bits of the hash, which another
// cluster's may share. Sweep deletes a firewall named with it only as the
// twin of one named with the whole prefix and the same key (the key is a
// 64-bit hash of this cluster's ID and the setting: no other cluster's).
func legacyFirewallNamePrefix(clusterID string) string {
	sum := sha256.Sum256([]byte(clusterID))
	return "pxo-" + hex.EncodeToString(sum[:4]) + "-"
}

// firewallRequest is the create request of the firewall of key: inbound,
// TCP port from cidrs only; outbound, everything (a DigitalOcean firewall
// without outbound rules would block the proxy's own traffic). It is pure;
// an unparsable range is an error naming the field.
func firewallRequest(clusterID, key, tag string, port int32, cidrs []crawlv1alpha1.CIDR) (*godo.FirewallRequest, error) {
	sources := make([]string, len(cidrs))
	for i, c := range cidrs {
		p, err := netip.ParsePrefix(string(c))
		if err != nil {
			return nil, fmt.Errorf("spec.digitalocean.allowFrom[%d]: %q is no CIDR", i, c)
		}
		sources[i] = p.Masked().String()
	}
	anywhere := &godo.Destinations{Addresses: []string{"0.0.0.0/0", "::/0"}}
	return &godo.FirewallRequest{
		Name:         firewallNamePrefix(clusterID) + key,
		InboundRules: []godo.InboundRule{{Protocol: "tcp", PortRange: strconv.Itoa(int(port)), Sources: &godo.Sources{Addresses: sources}}},
		OutboundRules: []godo.OutboundRule{
			{Protocol: "tcp", PortRange: "all", Destinations: anywhere},
			{Protocol: "udp", PortRange: "all", Destinations: anywhere},
			{Protocol: "icmp", Destinations: anywhere},
		},
		Tags: []string{tag},
	}, nil
}

// ownedFirewall makes sure the firewall spec.digitalocean.allowFrom asks
// for exists and returns the tag the droplet then carries. Firewall names
// are not unique on DigitalOcean, so it lists them before creating one: a
// create retried after a crash or a lost answer finds the one made before.
// The caller holds firewallUse (read).
func (p *Provider) ownedFirewall(ctx context.Context, s settings) (string, error) {
	key := cloudkit.AllowFromKey(s.port, s.allowFrom, p.clusterID)
	tag, _ := cloudkit.FlatTag(firewallTagName, key)
	p.mu.Lock()
	_, known := p.firewalls[key]
	if known {
		p.firewalls[key] = p.clock.Now()
	}
	p.mu.Unlock()
	if known {
		return tag, nil
	}
	req, err := firewallRequest(p.clusterID, key, tag, s.port, s.allowFrom)
	if err != nil {
		return "", provider.Permanent(fmt.Errorf("digitalocean provider: %w", err))
	}
	all, err := p.listFirewalls(ctx)
	if err != nil {
		return "", cloudkit.ProviderError("listing firewalls", err)
	}
	if !slices.ContainsFunc(all, func(fw godo.Firewall) bool { return fw.Name == req.Name }) {
		// The tag must exist before a firewall names it.
		err := p.call(ctx, func(ctx context.Context) (*godo.Response, error) {
			_, resp, err := p.client.Tags.Create(ctx, &godo.TagCreateRequest{Name: tag})
			return resp, err
		})
		if err == nil {
			err = p.call(ctx, func(ctx context.Context) (*godo.Response, error) {
				_, resp, err := p.client.Firewalls.Create(ctx, req)
				return resp, err
			})
		}
		if err != nil {
			return "", cloudkit.ProviderError("creating firewall "+req.Name, err)
		}
		klog.FromContext(ctx).Info("Created firewall", "firewall", req.Name)
	}
	p.mu.Lock()
	p.firewalls[key] = p.clock.Now()
	p.mu.Unlock()
	return tag, nil
}

func (p *Provider) listFirewalls(ctx context.Context) ([]godo.Firewall, error) {
	var all []godo.Firewall
	for page, last := 1, false; !last; page++ {
		err := p.call(ctx, func(ctx context.Context) (*godo.Response, error) {
			got, resp, err := p.client.Firewalls.List(ctx, &godo.ListOptions{Page: page, PerPage: 200})
			all = append(all, got...)
			last = err == nil && (resp.Links == nil || resp.Links.IsLastPage())
			return resp, err
		})
		if err != nil {
			return nil, err
		}
	}
	return all, nil
}

// Sweep deletes the firewalls this cluster owns (by their name's prefix)
// whose tag no droplet of this cluster carries (the orphan GC calls it
// after each round). The tag listing lags behind a create, so a firewall a
// create of this process used within the settle time is kept. A firewall
// an older operator named with the 32-bit prefix goes the same way once
// its twin under the whole prefix exists; it is handled first, so that
// the twin that proves it ours is still there.
func (p *Provider) Sweep(ctx context.Context) (int, error) {
	all, err := p.listFirewalls(ctx)
	if err != nil {
		return 0, cloudkit.ProviderError("listing firewalls", err)
	}
	prefix, legacy := firewallNamePrefix(p.clusterID), legacyFirewallNamePrefix(p.clusterID)
	owned := map[string]bool{}
	for _, fw := range all {
		if key, ok := strings.CutPrefix(fw.Name, prefix); ok {
			owned[key] = true
		}
	}
	var legacyTwins, ours []godo.Firewall
	for _, fw := range all {
		if key, ok := strings.CutPrefix(fw.Name, legacy); ok && owned[key] {
			legacyTwins = append(legacyTwins, fw)
		} else if strings.HasPrefix(fw.Name, prefix) {
			ours = append(ours, fw)
		}
	}
	deleted := 0
	var errs []error
	for _, fw := range append(legacyTwins, ours...) {
		if len(fw.Tags) != 1 {
			continue
		}
		key := fw.Name[strings.LastIndex(fw.Name, "-")+1:]
		gone, err := p.sweepFirewall(ctx, fw, key)
		if err != nil {
			errs = append(errs, err)
		}
		if gone {
			deleted++
		}
	}
	return deleted, errors.Join(errs...)
}

// sweepFirewall deletes fw when no droplet carries its tag and no create
// of this process used it within the settle time, holding firewallUse so
// that no create makes a droplet in between.
func (p *Provider) sweepFirewall(ctx context.Context, fw godo.Firewall, key string) (bool, error) {
	p.firewallUse.Lock()
	defer p.firewallUse.Unlock()
	p.mu.Lock()
	used, ok := p.firewalls[key]
	p.mu.Unlock()
	if ok && p.clock.Since(used) < p.settle {
		return false, nil
	}
	droplets, err := p.listTag(ctx, fw.Tags[0])
	if err != nil || len(droplets) > 0 {
		return false, cloudkit.ProviderError("listing the droplets of firewall "+fw.Name, err)
	}
	err = p.call(ctx, func(ctx context.Context) (*godo.Response, error) { return p.client.Firewalls.Delete(ctx, fw.ID) })
	if err != nil && cloudkit.KindOf(err) != cloudkit.KindNotFound {
		return false, cloudkit.ProviderError("deleting firewall "+fw.Name, err)
	}
	p.mu.Lock()
	delete(p.firewalls, key)
	p.mu.Unlock()
	klog.FromContext(ctx).Info("Deleted unused firewall", "firewall", fw.Name, "id", fw.ID)
	return true, nil
}
