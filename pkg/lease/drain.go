package lease

import (
	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// draining says whether a ProxyPool is taking the proxy out (the pool sets
// the annotation): the store then grants no new lease on it, and its live
// leases keep renewing, so that a crawler is not cut off mid-job.
func draining(p *crawlv1alpha1.Proxy) bool {
	_, ok := p.Annotations[crawlv1alpha1.DrainingAnnotation]
	return ok
}

// LeasesByProxy counts the live leases per Proxy name in namespace, for the
// pool controller's drains. It fails with ErrNotLeader on a store that does
// not lead (its counts would be meaningless).
func (s *Store) LeasesByProxy(namespace string) (map[string]int, error) {
	leases, err := s.List(LeaseFilter{Namespace: namespace})
	if err != nil {
		return nil, err
	}
	counts := make(map[string]int, len(leases))
	for _, l := range leases {
		counts[l.Proxy.Key.Name]++
	}
	return counts, nil
}

// Store is the server's lease store, for the doors beside the API: the pool
// controller's LeasesByProxy and the gateway's releases.
func (s *Server) Store() *Store { return s.store }
