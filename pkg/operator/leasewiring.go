package operator

import (
	"context"
	"fmt"
	"os"

	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	crawlinformersv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease"
	"github.com/proxyfleet/proxy-operator/pkg/metrics"
)

// newLeaseServer builds the lease API: the store fed by the Proxy informer,
// the authenticator of --lease-auth, credentials from the spec.auth Secrets,
// the horizon a successor reads after a leader change, and the fence of the
// leader election (nil without one).
func newLeaseServer(ctx context.Context, o Options, kube, authKube kubernetes.Interface, proxies crawlinformersv1alpha1.ProxyInformer, secrets corelisters.SecretLister, m *metrics.Metrics, fence *leadershipFence) (*lease.Server, cache.InformerSynced, error) {
	// Every replica signs and verifies lease IDs with one key, created by
	// the first replica to start.
	var key []byte
	err := untilAPIAnswers(ctx, "lease signing key", func(ctx context.Context) (err error) {
		key, err = lease.EnsureKey(ctx, kube, o.LeaderElectNamespace, LeaseKeySecret)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("lease signing key: %w", err)
	}
	store, err := lease.NewStore(lease.Config{
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

		LeadershipValidUntil: fence.validUntilFunc(),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("lease store: %w", err)
	}
	feed, err := lease.NewFeed(store, proxies)
	if err != nil {
		return nil, nil, fmt.Errorf("lease feed: %w", err)
	}
	var auth interface {
		lease.Authenticator
		lease.Authorizer
	}
	if o.LeaseAuth == LeaseAuthNone {
		auth = lease.NewNoAuth(klog.FromContext(ctx))
	} else {
		auth = lease.NewKubernetesAuth(authKube, lease.KubernetesAuthOptions{})
	}
	hostname, _ := os.Hostname()
	srv, err := lease.NewServer(lease.ServerConfig{
		Store:         store,
		Authenticator: auth,
		Authorizer:    auth,
		Credentials:   lease.SecretCredentials(secrets),
		Horizon:       lease.NewConfigMapHorizon(kube, o.LeaderElectNamespace, LeaseHorizonConfigMap, hostname),
	})
	return srv, feed.HasSynced, err
}
