// Package gc collects orphaned provider instances: instances the operator
// created (tag managed-by=proxy-operator) whose Proxy no longer exists, as
// happens when a Proxy's finalizer was removed by hand, its namespace was
// force-deleted, or a crash came between a Create and the status write of a
// Proxy deleted meanwhile. It runs on the leader, one round every Interval.
//
// It never deletes on doubt. An instance is kept when the informer cache
// holds a Proxy with the instance's proxy-uid tag; otherwise its Proxy is
// read from the API server (the cache may be stale), and the instance is
// deleted only if that read says NotFound for that very Proxy, or finds a
// Proxy of that name with another UID (deleted and recreated). Any other
// outcome (a read error, missing tags) keeps the instance. Instances without
// a proxy-uid tag are never touched.
//
// It also collects duplicates: a second instance of a Proxy that exists,
// beside the one its status names (a cloud launch retried at another place
// after its answer was lost). Only instances whose provider tells their age
// (Instance.CreatedAt: the cloud VMs) are judged, only when older than a
// grace period that covers a launch in flight, and only on a live read of
// the Proxy that names another instance (decide.go, duplicate).
//
// It is not the deletion path of a Proxy (the controller's finalizer is),
// and it does not watch instances: it lists them through the Provider
// interface.
package gc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawllisters "github.com/proxyfleet/proxy-operator/pkg/generated/listers/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// The reasons of the events recorded for a collected instance.
const (
	ReasonOrphanDeleted    = "OrphanDeleted"
	ReasonDuplicateDeleted = "DuplicateDeleted"
)

// Why a round deleted something: the reason label of
// proxy_operator_gc_collected_total.
const (
	CollectedOrphaned  = "orphaned"
	CollectedDuplicate = "duplicate"
	// CollectedSwept: resources besides instances that no instance uses
	// any longer (provider.Sweeper).
	CollectedSwept = "swept"
)

// CollectedReasons are every reason label, for metrics to predeclare.
var CollectedReasons = []string{CollectedOrphaned, CollectedDuplicate, CollectedSwept}

// DefaultDuplicateGrace is the age below which an instance is never a
// duplicate: far longer than a launch and its status write take, and than
// the five minutes EC2 may hide a new instance from its describes.
const DefaultDuplicateGrace = 10 * time.Minute

// liveReadTimeout bounds one confirmation read from the API server.
const liveReadTimeout = 30 * time.Second

// Metrics receives how many instances each round deleted, per provider
// and reason (CollectedOrphaned, ...); see pkg/metrics.
type Metrics interface {
	ObserveCollected(provider, reason string, n int)
	// ObserveProviderCall counts a provider call (op "list" or "delete") and
	// its error class, beside the controller's calls.
	ObserveProviderCall(provider, op string, err error)
}

type noMetrics struct{}

func (noMetrics) ObserveCollected(string, string, int)      {}
func (noMetrics) ObserveProviderCall(string, string, error) {}

// Config is what a Collector needs.
type Config struct {
	// Providers are the enabled providers; each round lists every one.
	Providers map[crawlv1alpha1.ProviderName]provider.Provider
	// Proxies is the informer cache: a Proxy found there saves a live read.
	Proxies crawllisters.ProxyLister
	// ProxiesSynced, optional, is the Proxy informer's HasSynced: Run waits
	// for it before the first round, because a cold cache turns every
	// instance into a live read. Correctness never depends on it.
	ProxiesSynced cache.InformerSynced
	// Live reads a Proxy from the API server to confirm it is gone.
	Live versioned.Interface
	// Interval is the time between rounds; a round is also cut off after it.
	Interval time.Duration
	// DuplicateGrace is the age below which no instance is judged a
	// duplicate. Default DefaultDuplicateGrace.
	DuplicateGrace time.Duration
	// Recorder, optional, records an OrphanDeleted event per deletion.
	Recorder record.EventRecorder
	// Metrics, optional, counts deletions.
	Metrics Metrics
	// Clock ticks the rounds; default the real clock.
	Clock clock.WithTicker
}

// Collector deletes orphaned instances. Create with New.
type Collector struct {
	providers map[crawlv1alpha1.ProviderName]provider.Provider
	proxies   crawllisters.ProxyLister
	synced    cache.InformerSynced
	live      versioned.Interface
	interval  time.Duration
	grace     time.Duration
	recorder  record.EventRecorder
	metrics   Metrics
	clock     clock.WithTicker
}

// New checks cfg. It starts nothing.
func New(cfg Config) (*Collector, error) {
	switch {
	case cfg.Proxies == nil:
		return nil, errors.New("gc: the Proxy lister is required")
	case cfg.Live == nil:
		return nil, errors.New("gc: the live client is required: without it no deletion can be confirmed")
	case cfg.Interval <= 0:
		return nil, fmt.Errorf("gc: interval must be positive, got %v", cfg.Interval)
	}
	c := &Collector{
		providers: cfg.Providers,
		proxies:   cfg.Proxies,
		synced:    cfg.ProxiesSynced,
		live:      cfg.Live,
		interval:  cfg.Interval,
		grace:     cfg.DuplicateGrace,
		recorder:  cfg.Recorder,
		metrics:   cfg.Metrics,
		clock:     cfg.Clock,
	}
	if c.metrics == nil {
		c.metrics = noMetrics{}
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if c.grace <= 0 {
		c.grace = DefaultDuplicateGrace
	}
	return c, nil
}

// Run collects at once (after the cache synced) and then every Interval,
// until ctx ends; it returns nil then. Call it on the leader only.
func (c *Collector) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("gc")
	ctx = klog.NewContext(ctx, logger)
	if c.synced != nil && !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return nil // ctx ended first
	}
	ticker := c.clock.NewTicker(c.interval)
	defer ticker.Stop()
	logger.V(2).Info("Collecting orphaned instances", "interval", c.interval, "providers", slices.Sorted(maps.Keys(c.providers)))
	for {
		c.round(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

func (c *Collector) round(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, c.interval)
	defer cancel()
	logger := klog.FromContext(ctx)
	deleted, err := c.CollectOnce(ctx)
	if err != nil {
		logger.Error(err, "Orphan collection incomplete; the next round retries", "deleted", deleted)
		return
	}
	logger.V(4).Info("Orphan collection done", "deleted", deleted)
}

// CollectOnce runs one round over every provider and returns how many
// instances (and swept resources) it deleted. The error joins everything
// that went wrong (a provider that could not be listed, an instance that
// could not be confirmed or deleted); the round goes on past each.
func (c *Collector) CollectOnce(ctx context.Context) (int, error) {
	cached, err := c.cachedRecords()
	if err != nil {
		return 0, err
	}
	total := 0
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(c.providers)) {
		counts, err := c.collect(ctx, name, c.providers[name], cached)
		for _, reason := range CollectedReasons {
			total += counts[reason]
			c.metrics.ObserveCollected(string(name), reason, counts[reason])
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("provider %s: %w", name, err))
		}
	}
	return total, errors.Join(errs...)
}

// cachedRecords are the Proxies in the informer cache by UID, taken once
// per round: instances are matched by UID, whatever their other tags say.
func (c *Collector) cachedRecords() (map[types.UID]proxyRecord, error) {
	proxies, err := c.proxies.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("gc: listing cached Proxies: %w", err)
	}
	records := make(map[types.UID]proxyRecord, len(proxies))
	for _, p := range proxies {
		records[p.UID] = recordOf(p)
	}
	return records, nil
}

// collect runs one round over one provider and counts what it deleted by
// reason.
func (c *Collector) collect(ctx context.Context, providerName crawlv1alpha1.ProviderName, prov provider.Provider, cached map[types.UID]proxyRecord) (map[string]int, error) {
	logger := klog.FromContext(ctx).WithValues("provider", providerName)
	counts := map[string]int{}
	instances, err := prov.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue)
	c.metrics.ObserveProviderCall(string(providerName), "list", err)
	if err != nil {
		return counts, fmt.Errorf("listing instances: %w", err)
	}
	var errs []error
	for _, inst := range instances {
		d, reason, unconfirmed := c.decide(ctx, providerName, inst, cached)
		proxyRef := klog.KRef(inst.Tags[crawlv1alpha1.TagProxyNamespace], inst.Tags[crawlv1alpha1.TagProxyName])
		if d.action != actionDelete {
			logger.V(5).Info("Keeping instance", "instance", inst.ID, "proxy", proxyRef, "reason", d.reason)
			if unconfirmed {
				errs = append(errs, fmt.Errorf("instance %s kept: %s", inst.ID, d.reason))
			}
			continue
		}
		err := prov.Delete(ctx, inst.ID)
		c.metrics.ObserveProviderCall(string(providerName), "delete", err)
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting %s instance %s: %w", reason, inst.ID, err))
			continue
		}
		counts[reason]++
		c.report(ctx, providerName, inst, reason, d.reason)
	}
	if s, ok := prov.(provider.Sweeper); ok {
		n, err := s.Sweep(ctx)
		c.metrics.ObserveProviderCall(string(providerName), "sweep", err)
		if err != nil {
			errs = append(errs, fmt.Errorf("sweeping: %w", err))
		}
		counts[CollectedSwept] += n
	}
	return counts, errors.Join(errs...)
}

// decide is what to do with one instance, and why it would go
// (CollectedOrphaned or CollectedDuplicate). It reads the instance's Proxy
// from the API server when the cache cannot vouch; unconfirmed is true
// when that read failed.
func (c *Collector) decide(ctx context.Context, providerName crawlv1alpha1.ProviderName, inst provider.Instance, cached map[types.UID]proxyRecord) (d decision, reason string, unconfirmed bool) {
	d = orphaned(inst.Tags, cached, nil)
	if d.action == actionConfirm {
		live := c.readLive(ctx, inst.Tags)
		return orphaned(inst.Tags, cached, live), CollectedOrphaned, live.err != nil
	}
	uid := types.UID(inst.Tags[crawlv1alpha1.TagProxyUID])
	rec, ok := cached[uid]
	if !ok {
		return d, CollectedOrphaned, false
	}
	self := provider.ProviderID(string(providerName), inst.ID)
	now := c.clock.Now()
	d = duplicate(self, inst.CreatedAt, now, c.grace, uid, rec.instance, nil)
	if d.action == actionConfirm {
		live := c.readLive(ctx, inst.Tags)
		d = duplicate(self, inst.CreatedAt, now, c.grace, uid, rec.instance, live)
		return d, CollectedDuplicate, live.err != nil
	}
	return d, CollectedDuplicate, false
}

// report logs a deletion and records its event.
func (c *Collector) report(ctx context.Context, providerName crawlv1alpha1.ProviderName, inst provider.Instance, reason, detail string) {
	proxyRef := klog.KRef(inst.Tags[crawlv1alpha1.TagProxyNamespace], inst.Tags[crawlv1alpha1.TagProxyName])
	what, eventReason := "orphaned", ReasonOrphanDeleted
	if reason == CollectedDuplicate {
		what, eventReason = "duplicate", ReasonDuplicateDeleted
	}
	klog.FromContext(ctx).Info("Deleted "+what+" instance", "provider", providerName, "instance", inst.ID, "proxy", proxyRef,
		"proxyUID", inst.Tags[crawlv1alpha1.TagProxyUID], "reason", detail)
	if c.recorder != nil {
		c.recorder.Eventf(orphanRef(inst.Tags), corev1.EventTypeNormal, eventReason,
			"Deleted %s %s instance %s: %s", what, providerName, inst.ID, detail)
	}
}

// readLive reads the instance's Proxy from the API server (a quorum read,
// not the cache). orphaned asks for it only when both tags are set.
func (c *Collector) readLive(ctx context.Context, tags map[string]string) *liveRead {
	ctx, cancel := context.WithTimeout(ctx, liveReadTimeout)
	defer cancel()
	p, err := c.live.CrawlV1alpha1().Proxies(tags[crawlv1alpha1.TagProxyNamespace]).
		Get(ctx, tags[crawlv1alpha1.TagProxyName], metav1.GetOptions{})
	if err != nil {
		return &liveRead{err: err}
	}
	return &liveRead{proxyRecord: recordOf(p)}
}

// orphanRef is the involved object of the OrphanDeleted and
// DuplicateDeleted events: the Proxy, by namespace, name and the UID the
// instance was tagged with. The event lands in the Proxy's namespace
// (kubectl get events -n); for a duplicate it shows in `kubectl describe`
// of the Proxy, and for an orphan the old UID keeps it out of a
// successor's of the same name.
func orphanRef(tags map[string]string) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: crawlv1alpha1.SchemeGroupVersion.String(),
		Kind:       "Proxy",
		Namespace:  tags[crawlv1alpha1.TagProxyNamespace],
		Name:       tags[crawlv1alpha1.TagProxyName],
		UID:        types.UID(tags[crawlv1alpha1.TagProxyUID]),
	}
}
