package operator

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"

	"github.com/proxyfleet/proxy-operator/pkg/dashboard"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// addDashboard serves the read-only web UI at /ui/ on the lease API's port,
// on every replica (docs/dashboard.md): built from the informers' caches
// and the lease store's memory, rebuilt when a Proxy, ProxyPool,
// CrawlPolicy or an event about one of them changes, with the lease API's
// authentication, and under --lease-auth=kubernetes the RoleBindings, which
// say which namespaces are worth a review for a viewer
// (docs/decisions/0420-dashboard-authorizes-per-identity-before-a-slot.md).
func (op *operator) addDashboard(o Options, kube kubernetes.Interface, crawlInformers crawlinformers.SharedInformerFactory, callers leaseCallers) error {
	proxies := crawlInformers.Crawl().V1alpha1().Proxies()
	pools := crawlInformers.Crawl().V1alpha1().ProxyPools()
	policies := crawlInformers.Crawl().V1alpha1().CrawlPolicies()
	eventInformers := newEventInformers(o, kube)
	op.dashboardInformers = []informers.SharedInformerFactory{eventInformers}
	events := eventInformers.Core().V1().Events()
	leases := op.leases.Store()
	inputs := func() dashboard.Inputs {
		in := dashboard.Inputs{}
		in.Pools, _ = pools.Lister().List(labels.Everything())     // a cache: never fails
		in.Proxies, _ = proxies.Lister().List(labels.Everything()) // likewise
		in.Policies, _ = policies.Lister().List(labels.Everything())
		in.Events, _ = events.Lister().List(labels.Everything())
		in.Leases, in.LeasesKnown = dashboardLeases(leases)
		in.Cooling = dashboardCooling(leases)
		return in
	}
	op.dashboard = dashboard.NewHub(dashboard.HubConfig{Inputs: inputs})
	op.dashboardHistory = dashboard.NewHistory(dashboard.HistoryConfig{Inputs: inputs, Interval: o.DashboardHistoryInterval})
	poke := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { op.dashboard.Poke() },
		UpdateFunc: func(any, any) { op.dashboard.Poke() },
		DeleteFunc: func(any) { op.dashboard.Poke() },
	}
	for _, informer := range []cache.SharedIndexInformer{proxies.Informer(), pools.Informer(), policies.Informer(), events.Informer()} {
		if _, err := informer.AddEventHandler(poke); err != nil {
			return fmt.Errorf("dashboard: %w", err)
		}
	}
	cfg := dashboard.Config{Hub: op.dashboard, History: op.dashboardHistory, Authenticator: callers, Authorizer: callers}
	if o.LeaseAuth == LeaseAuthKubernetes {
		rbac := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(o.Namespace))
		bindings, err := dashboard.NewRoleBindings(rbac.Rbac().V1().RoleBindings().Informer())
		if err != nil {
			return fmt.Errorf("dashboard: %w", err)
		}
		cfg.Bindings = bindings
		op.dashboardInformers = append(op.dashboardInformers, rbac)
	}
	h, err := dashboard.NewHandler(cfg)
	if err != nil {
		return err
	}
	for pattern, serve := range h.Routes() {
		op.leases.HandleFunc(pattern, serve)
	}
	return nil
}

// newEventInformers caches the events about crawl.proxyfleet.io objects
// only (a field selector: the API server filters), each cut to what the
// dashboard shows (dashboard.CachedEvent: any tenant may write such an
// event, of any size, in its namespace), for the dashboard's recent
// events; the page is not held back until it syncs.
func newEventInformers(o Options, kube kubernetes.Interface) informers.SharedInformerFactory {
	ours := fields.OneTermEqualSelector("involvedObject.apiVersion", crawlv1alpha1.SchemeGroupVersion.String()).String()
	return informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(o.Namespace),
		informers.WithTransform(dashboard.CachedEvent),
		informers.WithTweakListOptions(func(l *metav1.ListOptions) { l.FieldSelector = ours }))
}

// dashboardLeases are the store's live leases without their IDs, owners or
// state; false on a replica that does not lead.
func dashboardLeases(s *store.Store) ([]dashboard.Lease, bool) {
	live, err := s.List(store.LeaseFilter{})
	if err != nil { // store.ErrNotLeader: a standby knows no leases
		return nil, false
	}
	out := make([]dashboard.Lease, 0, len(live))
	for _, l := range live {
		out = append(out, dashboard.Lease{
			Namespace: l.Proxy.Key.Namespace, Proxy: l.Proxy.Key.Name,
			Holder: l.Holder, Domain: l.Domain, GrantedAt: l.GrantedAt,
		})
	}
	return out, true
}

// dashboardCooling are the store's cool-downs in force, a few domains per
// proxy; none on a replica that does not lead.
func dashboardCooling(s *store.Store) []dashboard.Cooling {
	cooling, err := s.CoolingDown(dashboard.CoolingDomainsShown)
	if err != nil { // store.ErrNotLeader
		return nil
	}
	out := make([]dashboard.Cooling, 0, len(cooling))
	for proxy, c := range cooling {
		row := dashboard.Cooling{Namespace: proxy.Namespace, Proxy: proxy.Name, Total: c.Total}
		for _, d := range c.Domains {
			row.Domains = append(row.Domains, d.Domain)
		}
		out = append(out, row)
	}
	return out
}
