package store

import "fmt"

// Outcomes count what happened to leases and to the requests on them: each
// release through the lease API counts once, and the gateway releases one
// lease per judged request in rotating mode, so a crawler's release and the
// gateway's verdict count the same (docs/politeness.md, "Outcomes").
type Outcomes struct {
	OK, Banned, Error int64
	// TransferredBytes went through the pool's members, as the gateway (or
	// a crawler) reported with renewals and releases (ReportAs).
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

// countOutcomesLocked counts n outcomes (a release's one, or the requests
// a report tells) for the pool of the proxy leased (when it is a member of
// one) and for the crawl policy rule of the domain (when one matches).
func (s *Store) countOutcomesLocked(p *proxyState, outcome Outcome, domain string, n int64) {
	if outcome == "" {
		outcome = OutcomeOK
	}
	m, _ := s.metrics.(OutcomeMetrics)
	if o := s.poolOutcomesLocked(p); o != nil {
		o.add(outcome, n)
		if m != nil {
			m.ObservePoolOutcomes(p.info.Key.Namespace, p.info.Pool, string(outcome), n)
		}
	}
	if p == nil || domain == "" {
		return
	}
	ns := p.info.Key.Namespace
	policy, rule, _, ok := matchRule(s.polite.policies[ns], domain)
	if !ok {
		return
	}
	s.polite.countsOf(budgetKey{namespace: ns, policy: policy, rule: rule}).outcomes.add(outcome, n)
	if m != nil {
		m.ObserveRuleOutcomes(ns, policy, rule, string(outcome), n)
	}
	s.observeTierLocked(p, outcome, domain, n) // tiers.go
}

// poolOutcomesLocked is the counts of p's pool, made on first use; nil
// when p is no pool's member.
func (s *Store) poolOutcomesLocked(p *proxyState) *Outcomes {
	if p == nil || p.info.Pool == "" {
		return nil
	}
	key := ObjectName{Namespace: p.info.Key.Namespace, Name: p.info.Pool}
	o := s.poolOutcomes[key]
	if o == nil {
		o = &Outcomes{}
		s.poolOutcomes[key] = o
	}
	return o
}

// The bounds of one report: what happened since the holder's last one,
// never a running total.
const (
	MaxTransferredReport = 1 << 40 // bytes: 1 TiB
	MaxOKRequestsReport  = 1 << 20
)

// Report is what a holder tells of a lease it keeps: the requests that
// went well on it and the bytes moved, since its last report.
type Report struct {
	OKRequests, TransferredBytes int64
}

// ReportAs counts what the holder of owner's lease id reports: the bytes
// towards the leased proxy's pool's usage (status.usage.transferredGiB,
// priced by spec.cost.perGiB) and the requests as ok outcomes for the pool
// and for the rule of the lease's domain, as releases count. The gateway
// reports with each renewal and release, so that a sticky session counts
// each request (its lease counts an outcome only when a ban or an error
// ends it). A report for a lease that has ended still counts (what
// happened while it was live); a proxy in no pool counts for no pool.
func (s *Store) ReportAs(owner, id string, r Report) error {
	if r.TransferredBytes < 0 || r.TransferredBytes > MaxTransferredReport {
		return &FieldError{Field: "transferredBytes", Message: fmt.Sprintf("must be between 0 and %d (the bytes moved since the last report); got %d", int64(MaxTransferredReport), r.TransferredBytes)}
	}
	if r.OKRequests < 0 || r.OKRequests > MaxOKRequestsReport {
		return &FieldError{Field: "okRequests", Message: fmt.Sprintf("must be between 0 and %d (the requests since the last report); got %d", int64(MaxOKRequestsReport), r.OKRequests)}
	}
	if r == (Report{}) {
		return nil
	}
	tok, err := s.decodeOwned(owner, id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading {
		return ErrNotLeader
	}
	p := s.proxies[tok.proxy]
	if p != nil && p.info.UID != tok.proxyUID {
		p = nil // a new Proxy of the same name: not the one leased
	}
	if o := s.poolOutcomesLocked(p); o != nil {
		o.TransferredBytes += r.TransferredBytes
	}
	if r.OKRequests > 0 {
		s.countOutcomesLocked(p, OutcomeOK, tok.domain, r.OKRequests)
	}
	return nil
}

// PoolOutcomes is what the store counted for a pool's members since it was
// made (a new leader's store starts from zero: pkg/pool adds its counts to
// the status it found when it began).
func (s *Store) PoolOutcomes(pool ObjectName) Outcomes {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.poolOutcomes[pool]; o != nil {
		return *o
	}
	return Outcomes{}
}

// ForgetPool drops a deleted pool's counts.
func (s *Store) ForgetPool(pool ObjectName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.poolOutcomes, pool)
}
