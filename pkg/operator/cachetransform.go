package operator

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
)

// lastAppliedAnnotation is kubectl apply's copy of the object it applied.
const lastAppliedAnnotation = corev1.LastAppliedConfigAnnotation

// trimForCache is the informers' transform (docs/decisions/0120-informers-cache-proxies-secrets-without-managedfields.md): it drops what
// the operator never reads from the objects it caches, before they are
// stored, so a fleet of 10,000 Proxies does not hold 10,000 copies of it.
//
//   - managedFields, from every object: nothing here reads them, and an
//     update sent without them (nil, not an empty list) leaves the server's
//     copy as it was, so the controller's Updates and UpdateStatus calls
//     from the cache keep every manager's fields.
//   - kubectl's last-applied-configuration, from Secrets only: for a
//     Secret applied with kubectl it repeats the whole data. No Secret is
//     updated from the cache (the kubernetes provider Gets before it
//     updates its cloud-init Secret), so nothing writes the trimmed copy
//     back. Proxies keep theirs: the controller updates Proxies (its
//     finalizer) from the cache, and an update without the annotation
//     would delete it.
//
// It changes objects in place: the informer hands it freshly decoded ones.
// Anything that is not an object (a tombstone) passes unchanged.
func trimForCache(obj any) (any, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return obj, nil
	}
	m.SetManagedFields(nil)
	if s, ok := obj.(*corev1.Secret); ok {
		delete(s.Annotations, lastAppliedAnnotation)
	}
	return obj, nil
}
