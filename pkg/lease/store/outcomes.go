package store

import "fmt"

// Outcomes count what happened to leases and to the requests on them: each
// release through the lease API counts once, and the gateway releases one
// lease per judged request in rotating mode, so a crawler's release and the
// gateway's verdict count the same (docs/politeness.md, "Outcomes").
type Outcomes struct {
	OK, Banned, Error int64
	// TransferredBytes went through the pool's members, as the gateway (or
	// a crawler) reported with renewals and releases (AddTransferredAs).
	TransferredBytes int64
}

// Total is every outcome counted.
func (o Outcomes) Total() int64 { return o.OK + o.Banned + o.Error }

// Plus is o and p summed.
func (o Outcomes) Plus(p Outcomes) Outcomes {
	return Outcomes{OK: o.OK + p.OK, Banned: o.Banned + p.Banned, Error: o.Error + p.Error, TransferredBytes: o.TransferredBytes + p.TransferredBytes}
}

func (o *Outcomes) add(outcome Outcome) {
	switch outcome {
	case OutcomeBanned:
		o.Banned++
	case OutcomeError:
		o.Error++
	default:
		o.OK++
	}
}

// OutcomeMetrics, when a Metrics implements it too, counts outcomes per
// pool and per crawl policy rule: never per domain, so the series stay as
// few as the pools and rules users wrote.
type OutcomeMetrics interface {
	ObservePoolOutcome(namespace, pool, outcome string)
	ObserveRuleOutcome(namespace, policy, rule, outcome string)
}

// countOutcomeLocked counts a release's outcome for the pool of the proxy
// it leased (when it is a member of one) and for the crawl policy rule of
// its domain (when one matches).
func (s *Store) countOutcomeLocked(p *proxyState, outcome Outcome, domain string) {
	if outcome == "" {
		outcome = OutcomeOK
	}
	m, _ := s.metrics.(OutcomeMetrics)
	if o := s.poolOutcomesLocked(p); o != nil {
		o.add(outcome)
		if m != nil {
			m.ObservePoolOutcome(p.info.Key.Namespace, p.info.Pool, string(outcome))
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
	s.polite.countsOf(budgetKey{namespace: ns, policy: policy, rule: rule}).outcomes.add(outcome)
	if m != nil {
		m.ObserveRuleOutcome(ns, policy, rule, string(outcome))
	}
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

// MaxTransferredReport bounds one report of transferred bytes (1 TiB): a
// report is what moved since the holder's last one, never a running total.
const MaxTransferredReport = 1 << 40

// AddTransferredAs counts bytes that went through the proxy of owner's
// lease id towards its pool's usage (status.usage.transferredGiB, priced
// by spec.cost.perGiB). The gateway reports what it moved with each
// renewal and release; a report for a lease that has ended still counts
// (the bytes moved while it was live), and one for a proxy that is no
// pool's member counts nowhere.
func (s *Store) AddTransferredAs(owner, id string, bytes int64) error {
	if bytes < 0 || bytes > MaxTransferredReport {
		return &FieldError{Field: "transferredBytes", Message: fmt.Sprintf("must be between 0 and %d (the bytes moved since the last report); got %d", int64(MaxTransferredReport), bytes)}
	}
	if bytes == 0 {
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
		o.TransferredBytes += bytes
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
