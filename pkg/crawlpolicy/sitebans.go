package crawlpolicy

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// ReasonSiteBanning is the reason of the event recorded on a CrawlPolicy
// when a site its rules govern banned the bound's worth of the
// namespace's proxies (docs/decisions/0413-a-site-bans-a-bounded-number-of-proxies.md).
const ReasonSiteBanning = "SiteBanning"

// SiteBlocks is what the writer needs of the lease store for the
// SiteBanning events (pkg/lease/store.Store implements it).
type SiteBlocks interface {
	SiteBlocks() ([]store.SiteBlock, error)
}

type siteBlockKey struct {
	namespace, site string
	tier            int
}

// WithSiteBanEvents makes the writer record a SiteBanning Warning event on
// the CrawlPolicy that governs a site, once for each block the store
// reports (and each tier of it). Call it before Run.
func (w *StatusWriter) WithSiteBanEvents(blocks SiteBlocks, recorder record.EventRecorder) *StatusWriter {
	w.siteBlocks, w.recorder = blocks, recorder
	w.announced = map[siteBlockKey]bool{}
	return w
}

// announceSiteBans records an event for each block the store reports that
// was not announced yet, and forgets the blocks that ended: a site
// blocked again later is announced again. Blocks of a site no policy of
// its namespace governs have no object to be told on.
func (w *StatusWriter) announceSiteBans(ctx context.Context) {
	if w.siteBlocks == nil {
		return
	}
	blocks, err := w.siteBlocks.SiteBlocks()
	if err != nil {
		return // not the leader (any more): it has no bans to tell
	}
	live := map[siteBlockKey]bool{}
	for _, b := range blocks {
		if b.Policy == "" {
			continue
		}
		key := siteBlockKey{b.Namespace, b.Site, b.Tier}
		live[key] = true
		if w.announced[key] {
			continue
		}
		p, err := w.lister.CrawlPolicies(b.Namespace).Get(b.Policy)
		if err != nil {
			continue // deleted meanwhile
		}
		w.announced[key] = true
		w.recorder.Event(p, corev1.EventTypeWarning, ReasonSiteBanning, SiteBanMessage(b))
		klog.FromContext(ctx).V(2).Info("A site banned the bound's worth of proxies", "policy", klog.KObj(p), "site", b.Site, "proxies", b.Proxies, "until", b.Until)
	}
	for key := range w.announced {
		if !live[key] {
			delete(w.announced, key)
		}
	}
}

// SiteBanMessage is the event's message for b.
func SiteBanMessage(b store.SiteBlock) string {
	tier := ""
	if b.TierName != "" {
		tier = fmt.Sprintf(" of tier %s (a tiered grant moves to the next tier; the last is refused)", b.TierName)
	}
	return fmt.Sprintf("%s (latest ban for %s) banned %d distinct proxies%s within %v: no lease for it until %s (429 SiteBanning, gateway site_banning)",
		b.Site, b.Domain, b.Proxies, tier, b.Window, b.Until.UTC().Format(time.RFC3339))
}
