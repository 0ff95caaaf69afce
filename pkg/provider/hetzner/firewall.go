package hetzner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// The labels of spec.hetzner.allowFrom's firewall (the aws provider's
// owned security group, on Hetzner: docs/decisions/0313-hetzner-owned-firewall-by-label.md).
const (
	// LabelOwnedFirewall marks a firewall the operator created (with
	// cloudkit.LabelClusterID): Sweep deletes it once no server uses it.
	LabelOwnedFirewall = "crawl.proxyfleet.io/owned-firewall"
	// LabelFirewall, on the firewall and on each server it guards, is the
	// key of the firewall's settings: the firewall applies itself to this
	// cluster's servers carrying it (a label selector).
	LabelFirewall = "crawl.proxyfleet.io/firewall"
)

// firewallName is the name of the firewall of key (unique in the project,
// which makes its create idempotent by name).
func firewallName(key string) string { return "proxy-operator-" + key }

// firewallOpts is the create request of the firewall of key: one inbound
// rule, TCP port from cidrs, applied to this cluster's servers labelled
// with key. It is pure; an unparsable range is an error naming the field.
func firewallOpts(clusterID, key string, port int32, cidrs []crawlv1alpha1.CIDR) (hcloud.FirewallCreateOpts, error) {
	rule := hcloud.FirewallRule{
		Direction: hcloud.FirewallRuleDirectionIn, Protocol: hcloud.FirewallRuleProtocolTCP,
		Port: hcloud.Ptr(strconv.Itoa(int(port))), Description: hcloud.Ptr("proxy-operator: spec.hetzner.allowFrom"),
	}
	for i, c := range cidrs {
		_, n, err := net.ParseCIDR(string(c))
		if err != nil {
			return hcloud.FirewallCreateOpts{}, fmt.Errorf("spec.hetzner.allowFrom[%d]: %q is no CIDR", i, c)
		}
		rule.SourceIPs = append(rule.SourceIPs, *n)
	}
	return hcloud.FirewallCreateOpts{
		Name: firewallName(key),
		Labels: map[string]string{
			cloudkit.LabelClusterID: clusterID, LabelOwnedFirewall: "true", LabelFirewall: key,
			crawlv1alpha1.TagManagedBy: crawlv1alpha1.ManagedByValue,
		},
		Rules: []hcloud.FirewallRule{rule},
		ApplyTo: []hcloud.FirewallResource{{
			Type:          hcloud.FirewallResourceTypeLabelSelector,
			LabelSelector: &hcloud.FirewallResourceLabelSelector{Selector: serversOf(clusterID, key)},
		}},
	}, nil
}

// serversOf is the label selector of this cluster's servers guarded by
// the firewall of key.
func serversOf(clusterID, key string) string {
	return cloudkit.LabelClusterID + "==" + clusterID + "," + LabelFirewall + "==" + key
}

// ownedFirewall makes sure the firewall spec.hetzner.allowFrom asks for
// exists and returns its key, the label the server then carries. It finds
// the firewall by name before creating it, so a create retried after a
// crash or a lost answer finds the one made before.
func (p *Provider) ownedFirewall(ctx context.Context, s settings) (string, error) {
	key := cloudkit.AllowFromKey(s.port, s.allowFrom, p.clusterID)
	p.mu.Lock()
	known := p.firewalls[key]
	p.mu.Unlock()
	if known {
		return key, nil
	}
	opts, err := firewallOpts(p.clusterID, key, s.port, s.allowFrom)
	if err != nil {
		return "", provider.Permanent(fmt.Errorf("hetzner provider: %w", err))
	}
	fw, err := p.firewallByName(ctx, opts.Name)
	if err == nil && fw == nil {
		err = p.call(ctx, func(ctx context.Context) (*hcloud.Response, error) {
			_, resp, err := p.client.Firewall.Create(ctx, opts)
			return resp, err
		})
		if cloudkit.KindOf(err) == cloudkit.KindConflict { // another worker, or a lost answer
			err = nil
		}
		if err == nil {
			klog.FromContext(ctx).Info("Created firewall", "firewall", opts.Name)
		}
	}
	if err != nil {
		return "", cloudkit.ProviderError("making firewall "+opts.Name, err)
	}
	p.mu.Lock()
	p.firewalls[key] = true
	p.mu.Unlock()
	return key, nil
}

func (p *Provider) firewallByName(ctx context.Context, name string) (*hcloud.Firewall, error) {
	var fw *hcloud.Firewall
	err := p.call(ctx, func(ctx context.Context) (resp *hcloud.Response, err error) {
		fw, resp, err = p.client.Firewall.GetByName(ctx, name)
		return resp, err
	})
	return fw, err
}

// Sweep deletes the firewalls this cluster owns that no server of its
// carries the label of any longer (the orphan GC calls it after each
// round). One still in use (Hetzner's resource_in_use) is left for a later
// round. Another cluster's firewalls are never listed.
func (p *Provider) Sweep(ctx context.Context) (int, error) {
	selector := cloudkit.LabelClusterID + "==" + p.clusterID + "," + LabelOwnedFirewall + "==true"
	firewalls, err := listAll(ctx, p, selector, func(ctx context.Context, opts hcloud.ListOpts) ([]*hcloud.Firewall, *hcloud.Response, error) {
		return p.client.Firewall.List(ctx, hcloud.FirewallListOpts{ListOpts: opts})
	})
	if err != nil {
		return 0, cloudkit.ProviderError("listing this cluster's firewalls", err)
	}
	deleted := 0
	var errs []error
	for _, fw := range firewalls {
		key := fw.Labels[LabelFirewall]
		if !cloudkit.Owned(fw.Labels, p.clusterID) || key == "" {
			continue
		}
		// No create of a server between the check and the delete.
		p.firewallUse.Lock()
		var servers []*hcloud.Server
		err := p.call(ctx, func(ctx context.Context) (*hcloud.Response, error) {
			got, resp, err := p.client.Server.List(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: serversOf(p.clusterID, key), PerPage: 1}})
			servers = got
			return resp, err
		})
		if err != nil || len(servers) > 0 {
			p.firewallUse.Unlock()
			if err != nil {
				errs = append(errs, cloudkit.ProviderError("listing the servers of firewall "+fw.Name, err))
			}
			continue
		}
		p.forgetFirewall(key)
		err = p.call(ctx, func(ctx context.Context) (*hcloud.Response, error) { return p.client.Firewall.Delete(ctx, fw) })
		p.firewallUse.Unlock()
		switch {
		case hcloud.IsError(err, hcloud.ErrorCodeResourceInUse), cloudkit.KindOf(err) == cloudkit.KindNotFound:
			continue
		case err != nil:
			errs = append(errs, cloudkit.ProviderError("deleting firewall "+fw.Name, err))
			continue
		}
		deleted++
		klog.FromContext(ctx).Info("Deleted unused firewall", "firewall", fw.Name, "id", fw.ID)
	}
	return deleted, errors.Join(errs...)
}

func (p *Provider) forgetFirewall(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.firewalls, key)
}
