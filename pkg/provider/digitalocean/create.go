package digitalocean

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/digitalocean/godo"
	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
)

// Create adopts the droplet an earlier create of the same key made, or
// makes one on the first size with capacity.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	if req.Proxy == nil || req.Name == "" {
		return provider.Instance{}, provider.Permanent(errors.New("digitalocean provider: a create request needs a name and a Proxy"))
	}
	s, err := settingsOf(req.Proxy, p.region)
	if err != nil {
		return provider.Instance{}, provider.Permanent(fmt.Errorf("digitalocean provider: %w", err))
	}
	creds, err := provider.ReadCredentials(ctx, "digitalocean", req.Proxy, p.secrets)
	if err != nil {
		return provider.Instance{}, err
	}
	userData, err := cloudkit.UserData("digitalocean", req, creds, s.port, MaxUserData)
	if err != nil {
		return provider.Instance{}, provider.Permanent(fmt.Errorf("digitalocean provider: %w", err))
	}
	name := cloudkit.InstanceName(req, p.clusterID)
	keyTag, _ := cloudkit.FlatTag(keyTagName, cloudkit.IdempotencyKey(req, p.clusterID)[:32])
	doing := fmt.Sprintf("creating droplet %s in %s", name, s.region)

	if inst, ok, err := p.adopt(ctx, keyTag); err != nil || ok {
		return inst, cloudkit.ProviderError(doing, err)
	}
	if p.unsettledFor(keyTag) {
		return provider.Instance{}, cloudkit.ProviderError(doing, cloudkit.Classify(cloudkit.KindTransient,
			errors.New("the answer of an earlier create was lost and its droplet is not listed yet; waiting for it before creating again")))
	}
	tags := dropletTags(cloudkit.Labels(req, p.clusterID, s.port), keyTag, s)
	if len(s.allowFrom) > 0 {
		p.firewallUse.RLock()
		defer p.firewallUse.RUnlock()
		firewallTag, err := p.ownedFirewall(ctx, s)
		if err != nil {
			return provider.Instance{}, err
		}
		tags = append(tags, firewallTag)
	}
	var inst provider.Instance
	err = cloudkit.WalkPlaces(s.sizes, func(size string) error {
		var d *godo.Droplet
		err := p.call(ctx, func(ctx context.Context) (resp *godo.Response, err error) {
			d, resp, err = p.client.Droplets.Create(ctx, createRequest(name, tags, userData, s, size))
			return resp, err
		})
		switch kind := cloudkit.KindOf(err); {
		case err == nil:
			inst = toInstance(d)
			p.settled(keyTag)
			klog.FromContext(ctx).V(2).Info("Droplet created", "droplet", name, "id", inst.ID, "size", size)
		case kind == cloudkit.KindCapacity:
			klog.FromContext(ctx).V(2).Info("No capacity; trying the next size", "droplet", name, "size", size)
		case kind == cloudkit.KindTransient:
			p.markUnsettled(keyTag) // the droplet may exist: no answer, or a 5xx after the effect
		}
		return err
	})
	return inst, cloudkit.ProviderError(doing, err)
}

// adopt returns the droplet an earlier create of this key made (ok true),
// and deletes any second one (two creates whose answers were lost): the
// oldest, lowest ID, stays, so that every create of the key keeps the same.
func (p *Provider) adopt(ctx context.Context, keyTag string) (inst provider.Instance, ok bool, err error) {
	found, err := p.listTag(ctx, keyTag)
	if err != nil || len(found) == 0 {
		return provider.Instance{}, false, err
	}
	logger := klog.FromContext(ctx)
	for _, extra := range found[1:] {
		if err := p.deleteDroplet(ctx, extra); err != nil {
			return provider.Instance{}, false, fmt.Errorf("deleting droplet %d, a second one of the same create: %w", extra.ID, err)
		}
		logger.Info("Deleted a second droplet of the same create", "droplet", extra.ID, "adopted", found[0].ID)
	}
	p.settled(keyTag)
	logger.V(2).Info("Adopting the droplet an earlier create made", "droplet", found[0].ID)
	return toInstance(&found[0]), true, nil
}

func (p *Provider) markUnsettled(keyTag string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.unsettled[keyTag]; !ok {
		p.unsettled[keyTag] = p.clock.Now()
	}
}

func (p *Provider) settled(keyTag string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.unsettled, keyTag)
}

// unsettledFor: a create of this key lost its answer less than SettleTime
// ago. Past it, the key is forgotten and the create goes ahead.
func (p *Provider) unsettledFor(keyTag string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	since, ok := p.unsettled[keyTag]
	if ok && p.clock.Since(since) >= p.settle {
		delete(p.unsettled, keyTag)
		return false
	}
	return ok
}

// droplet reads the droplet with this ID: nil when it does not exist or
// is another cluster's (which does not exist for this one).
func (p *Provider) droplet(ctx context.Context, id string) (*godo.Droplet, error) {
	n, err := strconv.Atoi(id)
	if err != nil || n <= 0 {
		return nil, nil
	}
	var d *godo.Droplet
	err = p.call(ctx, func(ctx context.Context) (resp *godo.Response, err error) {
		d, resp, err = p.client.Droplets.Get(ctx, n)
		return resp, err
	})
	switch {
	case cloudkit.KindOf(err) == cloudkit.KindNotFound:
		return nil, nil
	case err != nil || d == nil:
		return nil, err
	case !p.owned(d):
		klog.FromContext(ctx).V(2).Info("Ignoring a droplet of another cluster", "id", id)
		return nil, nil
	}
	return d, nil
}

func (p *Provider) owned(d *godo.Droplet) bool {
	return cloudkit.Owned(cloudkit.LabelsOfFlatTags(d.Tags), p.clusterID)
}

// Get observes the droplet with this ID.
func (p *Provider) Get(ctx context.Context, id string) (provider.Instance, error) {
	d, err := p.droplet(ctx, id)
	switch {
	case err != nil:
		return provider.Instance{}, cloudkit.ProviderError("reading droplet "+id, err)
	case d == nil:
		return provider.Instance{}, fmt.Errorf("droplet %s: %w", id, provider.ErrNotFound)
	}
	return toInstance(d), nil
}

// Delete deletes the droplet, if it is this cluster's; one that is gone is fine.
func (p *Provider) Delete(ctx context.Context, id string) error {
	d, err := p.droplet(ctx, id)
	if err != nil || d == nil {
		return cloudkit.ProviderError("reading droplet "+id+" before deleting it", err)
	}
	if err := p.deleteDroplet(ctx, *d); err != nil {
		return cloudkit.ProviderError("deleting droplet "+id, err)
	}
	klog.FromContext(ctx).V(2).Info("Droplet delete accepted", "id", id, "droplet", d.Name)
	return nil
}

// deleteDroplet deletes d; a droplet already gone is fine.
func (p *Provider) deleteDroplet(ctx context.Context, d godo.Droplet) error {
	err := p.call(ctx, func(ctx context.Context) (*godo.Response, error) {
		return p.client.Droplets.Delete(ctx, d.ID)
	})
	if cloudkit.KindOf(err) == cloudkit.KindNotFound {
		return nil
	}
	return err
}

// ListByTag lists this cluster's droplets carrying the label key=value.
func (p *Provider) ListByTag(ctx context.Context, key, value string) ([]provider.Instance, error) {
	tag, ok := cloudkit.FlatTag(key, value)
	if !ok {
		return nil, provider.Permanent(fmt.Errorf("digitalocean provider: label %s=%s is no DigitalOcean tag", key, value))
	}
	found, err := p.listTag(ctx, tag)
	if err != nil {
		return nil, cloudkit.ProviderError("listing droplets with tag "+tag, err)
	}
	out := make([]provider.Instance, 0, len(found))
	for i := range found {
		out = append(out, toInstance(&found[i]))
	}
	return out, nil
}

// listTag lists this cluster's droplets with tag, every page, by ID
// (oldest first).
func (p *Provider) listTag(ctx context.Context, tag string) ([]godo.Droplet, error) {
	var found []godo.Droplet
	for page, last := 1, false; !last; page++ {
		err := p.call(ctx, func(ctx context.Context) (*godo.Response, error) {
			got, resp, err := p.client.Droplets.ListByTag(ctx, tag, &godo.ListOptions{Page: page, PerPage: 200})
			found = append(found, got...)
			last = err == nil && (resp.Links == nil || resp.Links.IsLastPage())
			return resp, err
		})
		if err != nil {
			return nil, err
		}
	}
	found = slices.DeleteFunc(found, func(d godo.Droplet) bool { return !p.owned(&d) })
	slices.SortFunc(found, func(a, b godo.Droplet) int { return a.ID - b.ID })
	return found, nil
}
