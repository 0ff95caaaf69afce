package azure

import (
	"context"
	"errors"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// Create makes the create's public IP, NIC and VM, each named after the
// create's key: PUT creates or updates the resource of a name, so a retry
// after a lost answer or a crash converges on the same three. A VM that
// exists and did not fail is adopted as it is; the VM sizes are walked on
// capacity errors.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	if req.Proxy == nil || req.Name == "" {
		return provider.Instance{}, provider.Permanent(errors.New("azure provider: a create request needs a name and a Proxy"))
	}
	s, err := settingsOf(req.Proxy, p.location, p.subnetID)
	if err != nil {
		return provider.Instance{}, provider.Permanent(fmt.Errorf("azure provider: %w", err))
	}
	creds, err := provider.ReadCredentials(ctx, "azure", req.Proxy, p.secrets)
	if err != nil {
		return provider.Instance{}, err
	}
	userData, err := cloudkit.UserData("azure", req, creds, s.port, MaxUserData)
	if err != nil {
		return provider.Instance{}, provider.Permanent(fmt.Errorf("azure provider: %w", err))
	}
	name := cloudkit.InstanceName(req, p.clusterID)
	doing := fmt.Sprintf("creating VM %s in %s", name, s.location)
	if inst, ok, err := p.adopt(ctx, name); err != nil || ok {
		return inst, cloudkit.ProviderError(doing, err)
	}
	tags := azureTags(cloudkit.Labels(req, p.clusterID, s.port))
	nicID, err := p.network(ctx, name, tags, s)
	if err != nil {
		p.abandon(ctx, name, err)
		return provider.Instance{}, cloudkit.ProviderError(doing, err)
	}
	var inst provider.Instance
	err = cloudkit.WalkPlaces(s.sizes, func(size string) error {
		vm, err := virtualMachine(name, s.location, tags, s, size, nicID, userData)
		if err != nil {
			return err
		}
		poller, err := p.vms.BeginCreateOrUpdate(ctx, p.group, name, vm, nil)
		done, err := pollDone(ctx, p, poller, err)
		if err = classify(err); err == nil {
			klog.FromContext(ctx).V(2).Info("VM created", "vm", name, "size", size)
			inst, err = p.instance(ctx, &done.VirtualMachine)
			return err
		}
		if cloudkit.KindOf(err) == cloudkit.KindCapacity {
			klog.FromContext(ctx).V(2).Info("No capacity; trying the next size", "vm", name, "size", size)
			// An allocation failure leaves a failed VM of the name: gone
			// before the next size is tried. (SkuNotAvailable leaves none,
			// and a VM that did not fail is no one's to delete here.)
			if derr := p.deleteFailedVM(ctx, name); derr != nil {
				return derr
			}
		}
		return err
	})
	p.abandon(ctx, name, err)
	return inst, cloudkit.ProviderError(doing, err)
}

// abandon deletes the NIC and public IP of a create whose error is final
// for this spec (permanent, or no size with capacity): they would serve
// nothing until the Proxy goes. A VM of the name keeps them (Azure refuses
// to delete a NIC in use). After any other error the next create of the
// name reuses them.
func (p *Provider) abandon(ctx context.Context, name string, err error) {
	switch kind := cloudkit.KindOf(err); {
	case err == nil || (kind != cloudkit.KindPermanent && kind != cloudkit.KindCapacity && kind != cloudkit.KindQuota):
		return
	}
	nsgID, err := p.deleteNIC(ctx, nicName(name))
	if err == nil {
		err = p.deletePublicIP(ctx, ipName(name))
	}
	if err == nil && nsgID != "" {
		_, err = p.deleteSecurityGroupIfUnused(ctx, nsgID)
	}
	if err != nil {
		klog.FromContext(ctx).Info("Could not delete the NIC and public IP of a failed create; the Proxy's delete does", "vm", name, "err", err)
	}
}

// deleteFailedVM deletes this cluster's VM of this name if it failed.
func (p *Provider) deleteFailedVM(ctx context.Context, name string) error {
	vm, err := p.vm(ctx, name)
	if err != nil || vm == nil || !failed(vm) {
		return err
	}
	return p.deleteVM(ctx, name)
}

func failed(vm *armcompute.VirtualMachine) bool {
	return vm.Properties != nil && deref(vm.Properties.ProvisioningState) == "Failed"
}

// adopt returns the VM an earlier create of this name made (ok true),
// unless it failed: a failed VM is deleted so that the create makes it
// anew.
func (p *Provider) adopt(ctx context.Context, name string) (inst provider.Instance, ok bool, err error) {
	vm, err := p.vm(ctx, name)
	if err != nil || vm == nil {
		return provider.Instance{}, false, err
	}
	if failed(vm) {
		klog.FromContext(ctx).V(2).Info("Deleting the failed VM of an earlier create", "vm", name)
		return provider.Instance{}, false, p.deleteVM(ctx, name)
	}
	klog.FromContext(ctx).V(2).Info("Adopting the VM an earlier create made", "vm", name)
	inst, err = p.instance(ctx, vm)
	return inst, err == nil, err
}

// network makes the VM's public IP and NIC (and the owned security group
// of spec.azure.allowFrom) and returns the NIC's ID.
func (p *Provider) network(ctx context.Context, name string, tags map[string]*string, s settings) (string, error) {
	nsgID := ""
	if len(s.allowFrom) > 0 {
		p.nsgMu.RLock()
		defer p.nsgMu.RUnlock()
		nsgTags := azureTags(map[string]string{cloudkit.LabelClusterID: p.clusterID, LabelOwnedSecurityGroup: "true"})
		var err error
		if nsgID, err = p.ensureSecurityGroup(ctx, nsgName(p.clusterID, s), s.location, nsgTags, s); err != nil {
			return "", err
		}
	}
	ipPoller, err := p.ips.BeginCreateOrUpdate(ctx, p.group, ipName(name), publicIP(s.location, tags), nil)
	ip, err := pollDone(ctx, p, ipPoller, err)
	if err != nil {
		return "", classify(err)
	}
	nicPoller, err := p.nics.BeginCreateOrUpdate(ctx, p.group, nicName(name), networkInterface(s.location, tags, s, deref(ip.ID), nsgID), nil)
	nic, err := pollDone(ctx, p, nicPoller, err)
	if err != nil {
		return "", classify(err)
	}
	return deref(nic.ID), nil
}

// ensureSecurityGroup makes (or updates to the same rules) the owned group.
func (p *Provider) ensureSecurityGroup(ctx context.Context, name, location string, tags map[string]*string, s settings) (string, error) {
	poller, err := p.nsgs.BeginCreateOrUpdate(ctx, p.group, name, securityGroup(location, tags, s), nil)
	nsg, err := pollDone(ctx, p, poller, err)
	if err != nil {
		return "", classify(err)
	}
	return deref(nsg.ID), nil
}

// vm reads the VM of this name: nil when it does not exist or is another
// cluster's (which does not exist for this one).
func (p *Provider) vm(ctx context.Context, name string) (*armcompute.VirtualMachine, error) {
	if !validName.MatchString(name) {
		return nil, nil
	}
	resp, err := p.vms.Get(ctx, p.group, name, nil)
	switch err = classify(err); {
	case cloudkit.KindOf(err) == cloudkit.KindNotFound:
		return nil, nil
	case err != nil:
		return nil, err
	case !cloudkit.Owned(labelsOf(resp.Tags), p.clusterID):
		klog.FromContext(ctx).V(2).Info("Ignoring a VM of another cluster", "vm", name)
		return nil, nil
	}
	return &resp.VirtualMachine, nil
}

// instance is vm with the address of its public IP.
func (p *Provider) instance(ctx context.Context, vm *armcompute.VirtualMachine) (provider.Instance, error) {
	resp, err := p.ips.Get(ctx, p.group, ipName(deref(vm.Name)), nil)
	switch err = classify(err); {
	case cloudkit.KindOf(err) == cloudkit.KindNotFound:
		return toInstance(vm, nil), nil
	case err != nil:
		return provider.Instance{}, err
	}
	return toInstance(vm, &resp.PublicIPAddress), nil
}

// Get observes the VM with this name.
func (p *Provider) Get(ctx context.Context, id string) (provider.Instance, error) {
	vm, err := p.vm(ctx, id)
	switch {
	case err != nil:
		return provider.Instance{}, cloudkit.ProviderError("reading VM "+id, err)
	case vm == nil:
		return provider.Instance{}, fmt.Errorf("VM %s: %w", id, provider.ErrNotFound)
	}
	inst, err := p.instance(ctx, vm)
	return inst, cloudkit.ProviderError("reading the public IP of VM "+id, err)
}
