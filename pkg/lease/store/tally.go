package store

import "time"

// The tally counts what happened on the fleet for those who judge it: each
// pool's outcomes and bytes (a release counts once; the gateway releases
// one lease per judged request in rotating mode, so a crawler's release
// and the gateway's verdict count the same: docs/politeness.md,
// "Outcomes"), and each proxy instance's burn, first-hand, for a
// ProxyPool's spec.recycle (pkg/pool): the leases granted on it and, per
// domain, the latest ban. Burn belongs to the instance, like its
// cool-downs: a new UID or a new providerID (the Proxy controller replaced
// the instance under the same name) starts from zero. The rules' own
// counts are in rules.go.

// Outcomes count what happened to leases and to the requests on them.
type Outcomes struct {
	OK, Banned, Error int64
	// TransferredBytes went through the pool's members, as the gateway (or
	// a crawler) reported with renewals and releases (Report).
	TransferredBytes int64
}

// Total is every outcome counted.
func (o Outcomes) Total() int64 { return o.OK + o.Banned + o.Error }

// Plus is o and p summed.
func (o Outcomes) Plus(p Outcomes) Outcomes {
	return Outcomes{OK: o.OK + p.OK, Banned: o.Banned + p.Banned, Error: o.Error + p.Error, TransferredBytes: o.TransferredBytes + p.TransferredBytes}
}

func (o *Outcomes) add(outcome Outcome, n int64) {
	switch outcome {
	case OutcomeBanned:
		o.Banned += n
	case OutcomeError:
		o.Error += n
	default:
		o.OK += n
	}
}

// OutcomeMetrics, when a Metrics implements it too, counts outcomes per
// pool and per crawl policy rule: never per domain, so the series stay as
// few as the pools and rules users wrote.
type OutcomeMetrics interface {
	ObservePoolOutcomes(namespace, pool, outcome string, n int64)
	ObserveRuleOutcomes(namespace, policy, rule, outcome string, n int64)
}

// maxBurnDomains bounds the banned domains remembered per instance: the
// CRD's maximum of spec.recycle.maxBannedDomains, so a member that reaches
// it is burned under any policy and more would tell nothing.
const maxBurnDomains = 100

// burn is one instance's record.
type burn struct {
	// served is how many leases were granted on the instance.
	served int64
	// bannedAt is the latest ban per domain; nil until the first ban.
	bannedAt map[string]time.Time
}

// noteBan records a ban for domain at now. When the map is full the oldest
// ban gives way (the earliest time, then the smallest domain: never map
// order): a bounded map, and the freshest evidence kept.
func (b *burn) noteBan(domain string, now time.Time) {
	if b.bannedAt == nil {
		b.bannedAt = make(map[string]time.Time, 4)
	}
	if _, ok := b.bannedAt[domain]; !ok && len(b.bannedAt) >= maxBurnDomains {
		var oldest string
		var at time.Time
		for d, t := range b.bannedAt {
			if oldest == "" || t.Before(at) || (t.Equal(at) && d < oldest) {
				oldest, at = d, t
			}
		}
		delete(b.bannedAt, oldest)
	}
	b.bannedAt[domain] = now
}

// bannedWithin counts the distinct domains banned in the window ending at now.
func (b *burn) bannedWithin(window time.Duration, now time.Time) int {
	n := 0
	for _, t := range b.bannedAt {
		if now.Sub(t) <= window {
			n++
		}
	}
	return n
}

// Burn is what a proxy's current instance has been through.
type Burn struct {
	// ProviderID names the instance the counts belong to.
	ProviderID string
	// Served is how many leases were granted on it.
	Served int64
	// BannedDomains is how many distinct domains released a lease on it
	// with outcome banned within the window asked for.
	BannedDomains int
}

// tally is the policy.
type tally struct {
	noDecision
	// pools count releases per pool; bounded by the pools that exist,
	// KindPoolForget drops a deleted one's.
	pools map[ObjectName]*Outcomes
	// burns are by proxy, for its current instance.
	burns   map[ObjectName]*burn
	metrics Metrics
}

func newTally(m Metrics) *tally {
	return &tally{pools: map[ObjectName]*Outcomes{}, burns: map[ObjectName]*burn{}, metrics: m}
}

func (t *tally) installed(l *lease, how install) {
	if how.grant {
		t.burnOf(l.proxyKey).served++
	}
}

func (*tally) ended(*lease) {}

// forget drops the burn of a gone proxy or replaced instance.
func (t *tally) forget(key ObjectName, _ bool) { delete(t.burns, key) }

func (*tally) termEnded()             {}
func (*tally) promoted(time.Duration) {}

func (t *tally) burnOf(key ObjectName) *burn {
	b := t.burns[key]
	if b == nil {
		b = &burn{}
		t.burns[key] = b
	}
	return b
}

// count counts n outcomes and bytes for p's pool, when it is a member of one.
func (t *tally) count(p *proxyState, outcome Outcome, n, bytes int64) {
	if p == nil || p.info.Pool == "" {
		return
	}
	key := ObjectName{Namespace: p.info.Key.Namespace, Name: p.info.Pool}
	o := t.pools[key]
	if o == nil {
		o = &Outcomes{}
		t.pools[key] = o
	}
	o.TransferredBytes += bytes
	if n == 0 {
		return
	}
	o.add(outcome, n)
	if m, ok := t.metrics.(OutcomeMetrics); ok {
		m.ObservePoolOutcomes(p.info.Key.Namespace, p.info.Pool, string(outcome), n)
	}
}
