// Package inspectionca keeps the CA of every namespace that opted into TLS
// inspection (the label crawl.proxyfleet.io/inspection=enabled on the
// Namespace): the CA and its key in a Secret of the operator's own
// namespace, which tenants cannot read and the gateway does; the CA's
// certificate (and the previous one's during a rotation's overlap) in a
// ConfigMap of the namespace, for its crawlers to trust. It rotates a CA a
// month before it ends and removes both objects when the namespace leaves
// inspection. It runs on the leader, one workqueue keyed by namespace.
//
// It never logs, records or exports a key; events name the namespace and
// the certificate's end, nothing else (docs/inspection.md).
package inspectionca

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/proxyfleet/proxy-operator/pkg/inspection"
	"github.com/proxyfleet/proxy-operator/pkg/queueworker"
)

// FieldManager owns what the controller writes.
const FieldManager = "proxy-operator-inspection-ca"

// Event reasons, on the Namespace.
const (
	ReasonCAIssued  = "InspectionCAIssued"
	ReasonCARotated = "InspectionCARotated"
	ReasonCARemoved = "InspectionCARemoved"
)

// Config is what a Controller needs.
type Config struct {
	Kube kubernetes.Interface
	// Namespaces are every Namespace (their labels say who opted in).
	Namespaces coreinformers.NamespaceInformer
	// Secrets are the CA Secrets: the operator's namespace, label
	// inspection.CALabel (NewInformers makes it).
	Secrets coreinformers.SecretInformer
	// ConfigMaps are the published bundles: every namespace, the bundle's
	// name and label inspection.CALabel, kept as their digest
	// (NewInformers makes it).
	ConfigMaps coreinformers.ConfigMapInformer
	// OperatorNamespace holds the CA Secrets.
	OperatorNamespace string
	// Validity and RotateBefore of the CAs; defaults inspection's.
	Validity, RotateBefore time.Duration
	Recorder               record.EventRecorder
	Clock                  clock.Clock
}

// Controller keeps the inspected namespaces' CAs.
type Controller struct {
	cfg        Config
	namespaces corelisters.NamespaceLister
	secrets    corelisters.SecretLister
	configMaps corelisters.ConfigMapLister
	synced     []cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[string]
}

// New registers the event handlers; it starts nothing.
func New(cfg Config) (*Controller, error) {
	if cfg.Kube == nil || cfg.Namespaces == nil || cfg.Secrets == nil || cfg.ConfigMaps == nil || cfg.OperatorNamespace == "" {
		return nil, errors.New("inspectionca: Kube, the three informers and OperatorNamespace are required")
	}
	if cfg.Validity <= 0 {
		cfg.Validity = inspection.DefaultCAValidity
	}
	if cfg.RotateBefore <= 0 {
		cfg.RotateBefore = inspection.DefaultRotateBefore
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Recorder == nil {
		cfg.Recorder = &record.FakeRecorder{}
	}
	c := &Controller{
		cfg:        cfg,
		namespaces: cfg.Namespaces.Lister(),
		secrets:    cfg.Secrets.Lister(),
		configMaps: cfg.ConfigMaps.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "inspection-ca"}),
	}
	byName := func(obj any) {
		if o, err := metaOf(obj); err == nil {
			c.queue.Add(o.GetName())
		}
	}
	byInspected := func(obj any) {
		if o, err := metaOf(obj); err == nil {
			if ns := o.GetLabels()[inspection.InspectedNamespaceLabel]; ns != "" {
				c.queue.Add(ns)
			} else {
				c.queue.Add(o.GetNamespace()) // a ConfigMap: its own namespace
			}
		}
	}
	for _, reg := range []struct {
		informer cache.SharedIndexInformer
		enqueue  func(any)
	}{{cfg.Namespaces.Informer(), byName}, {cfg.Secrets.Informer(), byInspected}, {cfg.ConfigMaps.Informer(), byInspected}} {
		h, err := reg.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    reg.enqueue,
			UpdateFunc: func(_, obj any) { reg.enqueue(obj) },
			DeleteFunc: reg.enqueue,
		})
		if err != nil {
			return nil, fmt.Errorf("inspectionca: %w", err)
		}
		c.synced = append(c.synced, h.HasSynced)
	}
	return c, nil
}

func metaOf(obj any) (metav1.Object, error) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	o, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("not an object: %T", obj)
	}
	return o, nil
}

// Run syncs with one worker until ctx ends. Call it on the leader.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("inspection-ca")
	ctx = klog.NewContext(ctx, logger)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return nil
	}
	logger.V(2).Info("Keeping the CAs of inspected namespaces", "operatorNamespace", c.cfg.OperatorNamespace)
	queueworker.Run(ctx, c.queue, 1, func(ctx context.Context, ns string) (time.Duration, error) {
		after, err := c.sync(ctx, ns)
		if err != nil {
			queueworker.LogSyncFailure(klog.FromContext(ctx), "namespace", ns, err)
		}
		return after, err
	})
	return nil
}

// sync brings namespace's CA Secret and bundle ConfigMap to what its label
// asks for.
func (c *Controller) sync(ctx context.Context, namespace string) (time.Duration, error) {
	ns, err := c.namespaces.Get(namespace)
	if err != nil && !apierrors.IsNotFound(err) {
		return queueworker.NoRequeue, err
	}
	opted := err == nil && ns.DeletionTimestamp == nil && ns.Labels[inspection.NamespaceLabel] == inspection.NamespaceLabelValue
	var set inspection.CASet
	var parseErr error
	secret, err := c.secrets.Secrets(c.cfg.OperatorNamespace).Get(inspection.SecretName(namespace))
	switch {
	case err == nil:
		set, parseErr = inspection.ParseSecretData(secret.Data)
	case !apierrors.IsNotFound(err):
		return queueworker.NoRequeue, err
	}
	now := c.cfg.Clock.Now()
	switch decide(opted, set, parseErr, now, c.cfg.RotateBefore) {
	case actionRemove:
		return queueworker.NoRequeue, c.remove(ctx, ns, namespace, secret != nil)
	case actionIssue:
		ca, err := inspection.NewCA(namespace, now, c.cfg.Validity)
		if err != nil {
			return queueworker.NoRequeue, err
		}
		set = inspection.CASet{Current: ca}
		if err := c.writeSecret(ctx, namespace, set); err != nil {
			return queueworker.NoRequeue, err
		}
		klog.FromContext(ctx).Info("Issued an inspection CA", "namespace", namespace, "notAfter", set.Current.Cert.NotAfter)
		c.cfg.Recorder.Eventf(ns, corev1.EventTypeNormal, ReasonCAIssued, "Issued the TLS inspection CA (valid until %s); trust ConfigMap %s", set.Current.Cert.NotAfter.Format(time.RFC3339), inspection.BundleConfigMap)
	case actionRotate:
		if set, err = set.Rotated(namespace, now, c.cfg.Validity); err != nil {
			return queueworker.NoRequeue, err
		}
		if err := c.writeSecret(ctx, namespace, set); err != nil {
			return queueworker.NoRequeue, err
		}
		klog.FromContext(ctx).Info("Rotated an inspection CA", "namespace", namespace, "notAfter", set.Current.Cert.NotAfter)
		c.cfg.Recorder.Eventf(ns, corev1.EventTypeNormal, ReasonCARotated, "Rotated the TLS inspection CA; both are trusted until %s: reload ConfigMap %s", set.Previous.NotAfter.Format(time.RFC3339), inspection.BundleConfigMap)
	case actionPrune:
		set = set.Pruned(now)
		if err := c.writeSecret(ctx, namespace, set); err != nil {
			return queueworker.NoRequeue, err
		}
	}
	if err := c.publish(ctx, namespace, set.Bundle(now)); err != nil {
		return queueworker.NoRequeue, err
	}
	return nextLook(set, now, c.cfg.RotateBefore), nil
}

// writeSecret creates or replaces namespace's CA Secret.
func (c *Controller) writeSecret(ctx context.Context, namespace string, set inspection.CASet) error {
	data, err := set.SecretData()
	if err != nil {
		return err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: inspection.SecretName(namespace), Namespace: c.cfg.OperatorNamespace,
			Labels: map[string]string{inspection.CALabel: "true", inspection.InspectedNamespaceLabel: namespace},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	secrets := c.cfg.Kube.CoreV1().Secrets(c.cfg.OperatorNamespace)
	_, err = secrets.Create(ctx, s, metav1.CreateOptions{FieldManager: FieldManager})
	if apierrors.IsAlreadyExists(err) {
		var old *corev1.Secret
		if old, err = secrets.Get(ctx, s.Name, metav1.GetOptions{}); err == nil {
			s.ResourceVersion = old.ResourceVersion
			_, err = secrets.Update(ctx, s, metav1.UpdateOptions{FieldManager: FieldManager})
		}
	}
	if err != nil {
		return fmt.Errorf("writing the inspection CA Secret of namespace %s: %w", namespace, err)
	}
	return nil
}

// publish makes namespace's bundle ConfigMap hold bundle.
func (c *Controller) publish(ctx context.Context, namespace string, bundle []byte) error {
	cm, err := c.configMaps.ConfigMaps(namespace).Get(inspection.BundleConfigMap)
	if err == nil && bundleDigest(cm) == digestOf(bundle) {
		return nil
	}
	want := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: inspection.BundleConfigMap, Namespace: namespace, Labels: map[string]string{inspection.CALabel: "true"}},
		Data:       map[string]string{inspection.BundleKey: string(bundle)},
	}
	maps := c.cfg.Kube.CoreV1().ConfigMaps(namespace)
	if apierrors.IsNotFound(err) {
		_, err = maps.Create(ctx, want, metav1.CreateOptions{FieldManager: FieldManager})
	} else if err == nil {
		want.ResourceVersion = cm.ResourceVersion
		_, err = maps.Update(ctx, want, metav1.UpdateOptions{FieldManager: FieldManager})
	}
	if apierrors.IsAlreadyExists(err) {
		// Not in the cache, which holds only labelled ConfigMaps: someone
		// else's, which is never overwritten.
		return fmt.Errorf("ConfigMap %s/%s exists and is not the operator's (no label %s): delete or rename it to publish the inspection CA",
			namespace, inspection.BundleConfigMap, inspection.CALabel)
	}
	if err != nil {
		return fmt.Errorf("publishing the inspection CA of namespace %s: %w", namespace, err)
	}
	return nil
}

// remove deletes namespace's CA Secret and bundle: it left inspection.
func (c *Controller) remove(ctx context.Context, ns *corev1.Namespace, namespace string, hadSecret bool) error {
	err := c.cfg.Kube.CoreV1().Secrets(c.cfg.OperatorNamespace).Delete(ctx, inspection.SecretName(namespace), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the inspection CA Secret of namespace %s: %w", namespace, err)
	}
	if cm, err := c.configMaps.ConfigMaps(namespace).Get(inspection.BundleConfigMap); err == nil && cm.Labels[inspection.CALabel] == "true" {
		err = c.cfg.Kube.CoreV1().ConfigMaps(namespace).Delete(ctx, inspection.BundleConfigMap, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the inspection CA bundle of namespace %s: %w", namespace, err)
		}
	}
	if hadSecret && ns != nil {
		klog.FromContext(ctx).Info("Removed an inspection CA", "namespace", namespace)
		c.cfg.Recorder.Eventf(ns, corev1.EventTypeNormal, ReasonCARemoved, "The namespace left TLS inspection: its CA is deleted")
	}
	return nil
}
