package store

// Outcomes count what happened to leases and to the requests on them: each
// release through the lease API counts once, and the gateway releases one
// lease per judged request in rotating mode, so a crawler's release and the
// gateway's verdict count the same (docs/politeness.md, "Outcomes").
type Outcomes struct {
	OK, Banned, Error int64
}

// Total is every outcome counted.
func (o Outcomes) Total() int64 { return o.OK + o.Banned + o.Error }

// Plus is o and p summed.
func (o Outcomes) Plus(p Outcomes) Outcomes {
	return Outcomes{OK: o.OK + p.OK, Banned: o.Banned + p.Banned, Error: o.Error + p.Error}
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
	if p != nil && p.info.Pool != "" {
		key := ObjectName{Namespace: p.info.Key.Namespace, Name: p.info.Pool}
		o := s.poolOutcomes[key]
		if o == nil {
			o = &Outcomes{}
			s.poolOutcomes[key] = o
		}
		o.add(outcome)
		if m != nil {
			m.ObservePoolOutcome(key.Namespace, key.Name, string(outcome))
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
