package gatewaycmd

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/inspection"
)

// caMinters gives the gateway each inspected namespace's Minter, from the
// CA Secrets the operator keeps in its namespace (pkg/inspectionca): a
// Secret added or rotated replaces the namespace's Minter, a Secret gone
// ends its inspection. A namespace without a Secret is never inspected.
type caMinters struct {
	mu   sync.RWMutex
	byNS map[string]*inspection.Minter
}

func (c *caMinters) Minter(namespace string) *inspection.Minter {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.byNS[namespace]
}

// watchCAs starts an informer over the CA Secrets of namespace and returns
// the Minters it keeps, once it has synced (so that the first crawler of an
// inspected namespace is inspected). It stops with ctx.
func watchCAs(ctx context.Context, kube kubernetes.Interface, namespace string) (*caMinters, error) {
	logger := klog.FromContext(ctx)
	m := &caMinters{byNS: map[string]*inspection.Minter{}}
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = inspection.CALabel + "=true" }))
	informer := factory.Core().V1().Secrets().Informer()
	set := func(obj any) {
		s, ok := obj.(*corev1.Secret)
		if !ok {
			return
		}
		ns := s.Labels[inspection.InspectedNamespaceLabel]
		cas, err := inspection.ParseSecretData(s.Data)
		if ns == "" || err != nil {
			logger.Error(err, "An inspection CA Secret cannot be used; its namespace is not inspected", "secret", klog.KObj(s))
			m.forget(ns)
			return
		}
		minter, err := inspection.NewMinter(cas.Current, 0, nil)
		if err != nil {
			logger.Error(err, "Making the leaf key of an inspection CA", "namespace", ns)
			return
		}
		m.mu.Lock()
		m.byNS[ns] = minter
		m.mu.Unlock()
		logger.V(2).Info("Inspecting a namespace", "namespace", ns, "caNotAfter", cas.Current.Cert.NotAfter)
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if s, ok := obj.(*corev1.Secret); ok {
				m.forget(s.Labels[inspection.InspectedNamespaceLabel])
				logger.V(2).Info("No longer inspecting a namespace", "namespace", s.Labels[inspection.InspectedNamespaceLabel])
			}
		},
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("--inspection-ca-namespace: the CA Secrets of namespace %s did not sync", namespace)
	}
	return m, nil
}

func (c *caMinters) forget(namespace string) {
	c.mu.Lock()
	delete(c.byNS, namespace)
	c.mu.Unlock()
}

// targetRoots is the system's roots plus the certificates of path (PEM),
// what inspected targets are verified against; nil for no path: the
// system's alone.
func targetRoots(path string) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--inspection-target-roots: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--inspection-target-roots: %s holds no PEM certificate", path)
	}
	return pool, nil
}
