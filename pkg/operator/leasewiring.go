package operator

import (
	"context"
	"fmt"
	"os"

	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	crawlinformersv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/hostrule/site"
	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/failover"
	"github.com/proxyfleet/proxy-operator/pkg/lease/feed"
	"github.com/proxyfleet/proxy-operator/pkg/lease/push"
	"github.com/proxyfleet/proxy-operator/pkg/lease/replica"
	"github.com/proxyfleet/proxy-operator/pkg/lease/server"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/metrics"
)

// leaseCallers is the authenticator and authorizer of --lease-auth, which
// the lease API and the dashboard share (one cache of reviews).
type leaseCallers interface {
	auth.Authenticator
	auth.Authorizer
}

func newLeaseCallers(ctx context.Context, o Options, authKube kubernetes.Interface) leaseCallers {
	if o.LeaseAuth == LeaseAuthNone {
		return auth.NewNone(klog.FromContext(ctx))
	}
	return auth.NewKubernetes(authKube, auth.KubernetesOptions{})
}

// newLeaseServer builds the lease API: the store fed by the Proxy informer,
// callers' authentication, credentials from the Proxies' Secrets (signed
// for the lease where the instance checks them), the pusher that tells
// those instances of the leases' ends and renewals (run it on every replica),
// the horizon a successor reads after a leader change, and the fence of the
// leader election (nil without one).
func newLeaseServer(ctx context.Context, o Options, kube kubernetes.Interface, callers leaseCallers, proxies crawlinformersv1alpha1.ProxyInformer, secrets coreinformers.SecretInformer, m *metrics.Metrics, fence *leadershipFence, onLead func(*store.Store)) (*server.Server, *replica.Node, *push.Pusher, cache.InformerSynced, error) {
	// Every replica signs and verifies lease IDs with one key, created by
	// the first replica to start.
	var key []byte
	err := untilAPIAnswers(ctx, "lease signing key", func(ctx context.Context) (err error) {
		key, err = failover.EnsureKey(ctx, kube, o.LeaderElectNamespace, LeaseKeySecret)
		return err
	})
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("lease signing key: %w", err)
	}
	var pusher *push.Pusher
	credentials := feed.NewLeaseCredentials(proxies.Lister(), secrets.Lister(), func(l store.Lease, t push.Target) { pusher.Signed(l, t) })
	if pusher, err = push.New(push.Config{Resolve: credentials.Target, Metrics: m}); err != nil {
		return nil, nil, nil, nil, err
	}
	sc := store.Config{
		Key:        key,
		DefaultTTL: o.LeaseDefaultTTL,
		MinTTL:     o.LeaseMinTTL,
		MaxTTL:     o.LeaseMaxTTL,
		Metrics:    m,

		MaxLeasesPerOwner: o.LeaseMaxPerIdentity,
		MaxSessions:       o.LeaseMaxSessions,
		MaxCooldowns:      o.LeaseMaxCooldowns,
		MaxDomainBudgets:  o.LeaseMaxDomainBudgets,
		MaxStateBytes:     o.LeaseMaxStateBytes,

		MaxStateEntries:       o.LeaseMaxStateEntries,
		MaxStateBytesPerOwner: o.LeaseMaxStateBytesPerIdentity,

		SiteBanProxies: o.LeaseSiteBanProxies,
		SiteBanWindow:  o.LeaseSiteBanWindow,
		Site:           site.Of,

		LeadershipValidUntil: fence.validUntilFunc(),
		OnLeaseEnded:         pusher.Ended,
	}
	var (
		st   *store.Store
		node *replica.Node
		repl *server.Replication
	)
	if o.Replication.Mode == ReplicationRaft {
		// Raft's leadership fences the store, not the Kubernetes Lease's.
		sc.LeadershipValidUntil = nil
		if node, err = newReplicaNode(ctx, o, kube, sc, onLead, m); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("lease store's replication: %w", err)
		}
		st = node.Working()
		// A replica signs a lease's credentials from its own listers: until
		// they have listed the Proxies and Secrets, it would answer
		// CredentialsUnavailable for leases the leader granted.
		synced := func() bool { return proxies.Informer().HasSynced() && secrets.Informer().HasSynced() }
		repl = &server.Replication{
			Leases: node.Router(),
			Synced: synced,
			Ready:  func() bool { return synced() && replicaReady(node, o.Replication.ReplicaID) },
		}
	} else if st, err = store.New(sc); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("lease store: %w", err)
	}
	proxiesSynced, err := feed.Proxies(st, proxies)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("lease feed: %w", err)
	}
	cfg := server.Config{
		Store:         st,
		Replicated:    repl,
		Authenticator: callers,
		Authorizer:    callers,
		Credentials:   credentials.For,
	}
	if repl == nil {
		hostname, _ := os.Hostname()
		cfg.Horizon = failover.NewConfigMapHorizon(kube, o.LeaderElectNamespace, LeaseHorizonConfigMap, hostname)
	}
	srv, err := server.New(cfg)
	return srv, node, pusher, proxiesSynced, err
}
