package azure

import (
	"context"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v8"
	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// Delete deletes the VM of this name, then its NIC and public IP, and the
// owned security group the NIC was in once no other NIC is; each only if
// it is this cluster's, and one that is gone is fine. Every step is safe
// to repeat, so a Delete cut short is finished by the next.
func (p *Provider) Delete(ctx context.Context, id string) error {
	if !validName.MatchString(id) {
		return nil
	}
	vm, err := p.vms.Get(ctx, p.group, id, nil)
	switch err = classify(err); {
	case err == nil && !cloudkit.Owned(labelsOf(vm.Tags), p.clusterID):
		return nil // another cluster's
	case err == nil:
		if err := p.deleteVM(ctx, id); err != nil {
			return cloudkit.ProviderError("deleting VM "+id, err)
		}
	case cloudkit.KindOf(err) != cloudkit.KindNotFound:
		return cloudkit.ProviderError("reading VM "+id+" before deleting it", err)
	}
	nsgID, err := p.deleteNIC(ctx, nicName(id))
	if err != nil {
		return cloudkit.ProviderError("deleting the network interface of VM "+id, err)
	}
	if err := p.deletePublicIP(ctx, ipName(id)); err != nil {
		return cloudkit.ProviderError("deleting the public IP of VM "+id, err)
	}
	if nsgID != "" {
		if _, err := p.deleteSecurityGroupIfUnused(ctx, nsgID); err != nil {
			return cloudkit.ProviderError("deleting the network security group of VM "+id, err)
		}
	}
	klog.FromContext(ctx).V(2).Info("VM deleted", "vm", id)
	return nil
}

// deleteVM deletes the VM (and its OS disk); one already gone is fine.
func (p *Provider) deleteVM(ctx context.Context, name string) error {
	poller, err := p.vms.BeginDelete(ctx, p.group, name, nil)
	_, err = pollDone(ctx, p, poller, err)
	return ignoreNotFound(classify(err))
}

// deleteNIC deletes this cluster's NIC of this name and returns the
// security group it was in ("" for none).
func (p *Provider) deleteNIC(ctx context.Context, name string) (nsgID string, err error) {
	nic, err := p.nics.Get(ctx, p.group, name, nil)
	if err = classify(err); err != nil || !cloudkit.Owned(labelsOf(nic.Tags), p.clusterID) {
		return "", ignoreNotFound(err)
	}
	if nic.Properties != nil && nic.Properties.NetworkSecurityGroup != nil {
		nsgID = deref(nic.Properties.NetworkSecurityGroup.ID)
	}
	poller, err := p.nics.BeginDelete(ctx, p.group, name, nil)
	_, err = pollDone(ctx, p, poller, err)
	return nsgID, ignoreNotFound(classify(err))
}

// deletePublicIP deletes this cluster's public IP of this name.
func (p *Provider) deletePublicIP(ctx context.Context, name string) error {
	ip, err := p.ips.Get(ctx, p.group, name, nil)
	if err = classify(err); err != nil || !cloudkit.Owned(labelsOf(ip.Tags), p.clusterID) {
		return ignoreNotFound(err)
	}
	poller, err := p.ips.BeginDelete(ctx, p.group, name, nil)
	_, err = pollDone(ctx, p, poller, err)
	return ignoreNotFound(classify(err))
}

// deleteSecurityGroupIfUnused deletes the owned group of this ID unless a
// NIC is still in it: Azure refuses to delete a group in use
// (InUseNetworkSecurityGroupCannotBeDeleted), which is the answer here.
func (p *Provider) deleteSecurityGroupIfUnused(ctx context.Context, id string) (deleted bool, err error) {
	name := resourceName(id)
	p.nsgMu.Lock()
	defer p.nsgMu.Unlock()
	nsg, err := p.nsgs.Get(ctx, p.group, name, nil)
	if err = classify(err); err != nil || !p.ownedGroup(nsg.Tags) {
		return false, ignoreNotFound(err)
	}
	if nsg.Properties != nil && len(nsg.Properties.NetworkInterfaces) > 0 {
		return false, nil
	}
	poller, err := p.nsgs.BeginDelete(ctx, p.group, name, nil)
	_, err = pollDone(ctx, p, poller, err)
	if err = classify(err); errorCode(err) == "InUseNetworkSecurityGroupCannotBeDeleted" {
		return false, nil
	}
	return err == nil, ignoreNotFound(err)
}

// LabelOwnedSecurityGroup marks a network security group the operator made
// for spec.azure.allowFrom (the tag pxo-owned-security-group): only such a
// group of this cluster is ever deleted, never another one that carries
// the cluster's tag (docs/decisions/0432-azure-sweeps-only-marked-security-groups.md).
const LabelOwnedSecurityGroup = "crawl.proxyfleet.io/owned-security-group"

// ownedGroup reports whether a security group with these tags is one this
// cluster made for allowFrom.
func (p *Provider) ownedGroup(tags map[string]*string) bool {
	labels := labelsOf(tags)
	return cloudkit.Owned(labels, p.clusterID) && labels[LabelOwnedSecurityGroup] == "true"
}

// Sweep deletes the security groups this cluster made that no NIC is in.
// Delete removes a VM's group after its NIC, but only while it still knows
// the group from the NIC: a delete whose group step failed and that was
// retried finds the NIC gone, and two last NICs deleted at once may each
// still see the other in the group. The orphan collector calls Sweep each
// pass, so such a group goes on the next one. It returns how many it
// deleted.
func (p *Provider) Sweep(ctx context.Context) (int, error) {
	var unused []string
	pager := p.nsgs.NewListPager(p.group, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return 0, cloudkit.ProviderError("listing network security groups", classify(err))
		}
		for _, nsg := range page.Value {
			inUse := nsg.Properties != nil && len(nsg.Properties.NetworkInterfaces) > 0
			if p.ownedGroup(nsg.Tags) && !inUse {
				unused = append(unused, deref(nsg.ID))
			}
		}
	}
	deleted := 0
	for _, id := range unused {
		gone, err := p.deleteSecurityGroupIfUnused(ctx, id)
		if err != nil {
			return deleted, cloudkit.ProviderError("deleting the unused network security group "+resourceName(id), err)
		}
		if gone {
			deleted++
		}
	}
	return deleted, nil
}

// ListByTag lists this cluster's instances carrying the label key=value:
// its VMs, and the public IPs without a VM (a create cut short before its
// VM, or a delete before its public IP), which Delete then finishes.
func (p *Provider) ListByTag(ctx context.Context, key, value string) ([]provider.Instance, error) {
	match := func(tags map[string]*string) bool {
		labels := labelsOf(tags)
		return cloudkit.Owned(labels, p.clusterID) && labels[key] == value
	}
	ips := map[string]*armnetwork.PublicIPAddress{}
	ipPager := p.ips.NewListPager(p.group, nil)
	for ipPager.More() {
		page, err := ipPager.NextPage(ctx)
		if err != nil {
			return nil, cloudkit.ProviderError("listing public IPs", classify(err))
		}
		for _, ip := range page.Value {
			if match(ip.Tags) {
				ips[deref(ip.Name)] = ip
			}
		}
	}
	var out []provider.Instance
	vmPager := p.vms.NewListPager(p.group, nil)
	for vmPager.More() {
		page, err := vmPager.NextPage(ctx)
		if err != nil {
			return nil, cloudkit.ProviderError("listing VMs", classify(err))
		}
		for _, vm := range page.Value {
			if match(vm.Tags) {
				out = append(out, toInstance(vm, ips[ipName(deref(vm.Name))]))
				delete(ips, ipName(deref(vm.Name)))
			}
		}
	}
	for ipName, ip := range ips {
		// Its VM is being made or was deleted: new to the orphan
		// collector's duplicate rule, which waits for it.
		vm := &armcompute.VirtualMachine{Name: to.Ptr(strings.TrimSuffix(ipName, "-ip")), Tags: ip.Tags}
		inst := toInstance(vm, nil)
		inst.CreatedAt, inst.Message = p.clock.Now(), "a public IP without its VM"
		out = append(out, inst)
	}
	return out, nil
}

// resourceName is the last segment of a resource ID.
func resourceName(id string) string {
	for i := len(id) - 1; i >= 0; i-- {
		if id[i] == '/' {
			return id[i+1:]
		}
	}
	return id
}

func ignoreNotFound(err error) error {
	if cloudkit.KindOf(err) == cloudkit.KindNotFound {
		return nil
	}
	return err
}
