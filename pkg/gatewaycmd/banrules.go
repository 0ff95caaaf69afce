package gatewaycmd

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/bandetect"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/kubeconfig"
)

// syncTimeout bounds the first list: a gateway without the right to list
// fails to start, naming it, rather than hanging.
const syncTimeout = time.Minute

// banRules keeps every namespace's CrawlPolicies' ban rules, compiled, from
// an informer; it returns once the informer has synced, so that the first
// request of a site is judged by its rule. It stops with ctx.
func (o Options) banRules(ctx context.Context, version string) (*bandetect.Rules, error) {
	cfg, err := kubeconfig.Load(o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "proxy-operator-gateway/" + version
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("crawl client: %w", err)
	}
	rules := bandetect.NewRules()
	factory := crawlinformers.NewSharedInformerFactory(client, 0)
	informer := factory.Crawl().V1alpha1().CrawlPolicies().Informer()
	set := func(obj any) {
		if p, ok := obj.(*crawlv1alpha1.CrawlPolicy); ok {
			rules.Set(p)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if p, ok := obj.(*crawlv1alpha1.CrawlPolicy); ok {
				rules.Delete(p.Namespace, p.Name)
			}
		},
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("CrawlPolicies not listed within %s: the gateway's ServiceAccount needs list and watch on crawlpolicies.crawl.proxyfleet.io (artifacts/rbac)", syncTimeout)
	}
	klog.FromContext(ctx).V(2).Info("Judging responses by the CrawlPolicies' ban rules")
	return rules, nil
}
