package aws

import (
	"context"
	"fmt"
	"slices"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// A client token makes one launch at one place idempotent, not a create:
// a create that walks on to another place or token, after a capacity error
// or a crash, would launch a second instance beside one an earlier attempt
// launched (its answer lost, or its status never written). So before every
// launch under a token of its own, a create looks for the instances this
// cluster already runs for the Proxy, by their tags, and adopts one.
// EC2 may hide a new instance from describes for a while, so this narrows
// the window rather than closing it; the orphan collector deletes what
// slips through (pkg/gc, duplicates).

// adoptLaunched returns a live instance already launched for the request's
// Proxy (ok true), and terminates any others: the create needs one. It
// prefers one built from the request's spec (the controller replaces one
// from an older spec, as after any adopted create), then the oldest.
func (p *Provider) adoptLaunched(ctx context.Context, region string, req provider.CreateRequest) (inst provider.Instance, ok bool, err error) {
	found, err := p.launchedFor(ctx, region, req.Proxy)
	if err != nil || len(found) == 0 {
		return provider.Instance{}, false, err
	}
	slices.SortStableFunc(found, func(a, b provider.Instance) int {
		if aCurrent, bCurrent := a.SpecHash == req.SpecHash, b.SpecHash == req.SpecHash; aCurrent != bCurrent {
			if aCurrent {
				return -1
			}
			return 1
		}
		return a.CreatedAt.Compare(b.CreatedAt)
	})
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Adopting an instance launched earlier for this Proxy", "instance", found[0].ID, "others", len(found)-1)
	for _, extra := range found[1:] {
		if err := p.Delete(ctx, extra.ID); err != nil {
			return provider.Instance{}, false, fmt.Errorf("terminating %s, a second instance launched for %s: %w", extra.ID, req.Name, err)
		}
		logger.Info("Terminated a second instance launched for this Proxy", "instance", extra.ID, "adopted", found[0].ID)
	}
	return found[0], true, nil
}

// launchedFor lists the pending and running instances of this cluster
// tagged with the Proxy's UID, in region.
func (p *Provider) launchedFor(ctx context.Context, region string, proxy *crawlv1alpha1.Proxy) ([]provider.Instance, error) {
	filters := []types.Filter{
		{Name: awssdk.String("tag:" + crawlv1alpha1.TagProxyUID), Values: []string{string(proxy.UID)}},
		{Name: awssdk.String("tag:" + TagClusterID), Values: []string{p.clusterID}},
		{Name: awssdk.String("instance-state-name"), Values: []string{"pending", "running"}},
	}
	var out []provider.Instance
	pages := ec2.NewDescribeInstancesPaginator(p.client(region), &ec2.DescribeInstancesInput{Filters: filters})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("looking for instances already launched for Proxy %s in region %s: %w", proxy.UID, region, classify(err))
		}
		for _, r := range page.Reservations {
			for _, in := range r.Instances {
				if inst, ok := toInstance(region, in); ok {
					out = append(out, inst)
				}
			}
		}
	}
	return out, nil
}
