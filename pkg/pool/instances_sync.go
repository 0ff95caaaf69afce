package pool

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// Events of a pool with spec.membersPerInstance.
const (
	EventInstanceCreated = "InstanceCreated"
	EventInstanceDeleted = "InstanceDeleted"
	// EventNoSessionProvider: no enabled provider makes sessions, so the
	// pool cannot make members.
	EventNoSessionProvider = "NoSessionProvider"
)

// shared is a pool's instances as the plan sees them, and their Proxies.
type shared struct {
	instances []Instance
	byName    map[string]*crawlv1alpha1.Proxy
}

// exitRanges are each instance's status.exitRanges.
func (s shared) exitRanges() map[string][]string {
	out := make(map[string][]string, len(s.byName))
	for name, p := range s.byName {
		out[name] = p.Status.ExitRanges
	}
	return out
}

// sharedInstances reads the pool's instances from the cache (with its own
// creates the cache has not shown yet) and counts the members on each.
func (c *Controller) sharedInstances(pool *crawlv1alpha1.ProxyPool, members map[string]*crawlv1alpha1.Proxy) (shared, error) {
	sel := labels.SelectorFromSet(labels.Set{crawlv1alpha1.PoolInstanceLabel: pool.Name})
	proxies, err := c.proxies.Proxies(pool.Namespace).List(sel)
	if err != nil {
		return shared{}, err
	}
	key := cache.MetaObjectToName(pool)
	now := c.clock.Now()
	active, users := map[string]int{}, map[string]int{}
	for _, m := range members {
		name := c.providers.SessionInstance(m)
		users[name]++
		if m.DeletionTimestamp == nil && m.Annotations[crawlv1alpha1.DrainingAnnotation] == "" {
			active[name]++
		}
	}
	for name, op := range c.pending.snapshot(key, now) {
		if _, seen := members[name]; !seen && op.kind == opCreate && op.instance != "" {
			active[op.instance]++
			users[op.instance]++
		}
	}
	out := shared{byName: map[string]*crawlv1alpha1.Proxy{}}
	for _, p := range proxies {
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != pool.UID {
			continue
		}
		out.byName[p.Name] = p
		out.instances = append(out.instances, Instance{
			Name:     p.Name,
			Revision: p.Labels[crawlv1alpha1.PoolRevisionLabel],
			Serving:  p.Status.Phase == crawlv1alpha1.PhaseReady && len(p.Status.ExitRanges) > 0 && p.DeletionTimestamp == nil,
			Deleting: p.DeletionTimestamp != nil,
			Active:   active[p.Name],
			Users:    users[p.Name],
		})
	}
	for name, op := range c.pendingInstances.snapshot(key, now) {
		_, seen := out.byName[name]
		switch {
		case !seen && op.kind == opCreate:
			out.instances = append(out.instances, Instance{Name: name, Revision: op.revision})
		case seen && op.kind == opDelete:
			for i := range out.instances {
				if out.instances[i].Name == name {
					out.instances[i].Deleting = true
				}
			}
		}
	}
	return out, nil
}

// actOnInstances deletes and creates instances, then creates the members
// the plan placed; it returns every write's error.
func (c *Controller) actOnInstances(ctx context.Context, pool *crawlv1alpha1.ProxyPool, revision string, plan InstancePlan, sh shared) []error {
	var errs []error
	for _, name := range plan.Delete {
		errs = append(errs, c.deleteInstance(ctx, pool, sh.byName[name]))
	}
	for range plan.Create {
		errs = append(errs, c.createInstance(ctx, pool, revision))
	}
	for _, name := range plan.Place {
		instance := sh.byName[name]
		spec, ok := c.providers.SessionSpec(instance, &pool.Spec.Template.Spec)
		if !ok {
			c.recorder.Eventf(pool, corev1.EventTypeWarning, EventNoSessionProvider,
				"spec.membersPerInstance: no enabled provider makes sessions on an instance; enable it with the operator's --providers flag")
			return append(errs, errors.New("spec.membersPerInstance: no enabled provider makes sessions"))
		}
		errs = append(errs, c.createProxy(ctx, pool, revision, spec, name))
	}
	return errs
}

func (c *Controller) createInstance(ctx context.Context, pool *crawlv1alpha1.ProxyPool, revision string) error {
	key := cache.MetaObjectToName(pool)
	for range 3 { // a name clash is rare: retry with a new suffix
		name := pool.Name + "-i" + randomSuffix()
		p := &crawlv1alpha1.Proxy{
			ObjectMeta: metav1.ObjectMeta{
				Name:      name,
				Namespace: pool.Namespace,
				// Only the pool's labels: the template's could match a
				// lease selector, and an instance is leased only through
				// its members.
				Labels:          map[string]string{crawlv1alpha1.PoolInstanceLabel: pool.Name, crawlv1alpha1.PoolRevisionLabel: revision},
				Annotations:     copyMap(pool.Spec.Template.Metadata.Annotations),
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pool, crawlv1alpha1.SchemeGroupVersion.WithKind("ProxyPool"))},
			},
			Spec: *pool.Spec.Template.Spec.DeepCopy(),
		}
		c.pendingInstances.expect(key, name, pendingOp{kind: opCreate, at: c.clock.Now(), revision: revision})
		_, err := c.crawl.CrawlV1alpha1().Proxies(pool.Namespace).Create(ctx, p, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			c.pendingInstances.forget(key, name)
			continue
		}
		if err != nil {
			c.pendingInstances.forget(key, name)
			return fmt.Errorf("creating instance: %w", err)
		}
		klog.FromContext(ctx).Info("Created instance", "instance", name, "revision", revision)
		c.recorder.Eventf(pool, corev1.EventTypeNormal, EventInstanceCreated, "Created instance %s (revision %s) for up to %d members", name, revision, *pool.Spec.MembersPerInstance)
		return nil
	}
	return errors.New("creating instance: three name clashes in a row")
}

// deleteInstance deletes an instance no member uses any longer.
func (c *Controller) deleteInstance(ctx context.Context, pool *crawlv1alpha1.ProxyPool, p *crawlv1alpha1.Proxy) error {
	if p == nil {
		return nil
	}
	key := cache.MetaObjectToName(pool)
	c.pendingInstances.expect(key, p.Name, pendingOp{kind: opDelete, at: c.clock.Now()})
	uid := p.UID
	err := c.crawl.CrawlV1alpha1().Proxies(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		c.pendingInstances.forget(key, p.Name)
		return fmt.Errorf("deleting instance %s: %w", p.Name, err)
	}
	klog.FromContext(ctx).Info("Deleted instance", "instance", p.Name)
	c.recorder.Eventf(pool, corev1.EventTypeNormal, EventInstanceDeleted, "Deleted instance %s: no member uses it", p.Name)
	return nil
}
