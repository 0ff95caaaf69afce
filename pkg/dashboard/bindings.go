package dashboard

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
)

// RoleBindings is the Bindings of RBAC: a cache of every RoleBinding, each
// kept as the keys of the subjects it names, indexed by them. A RoleBinding
// grants in its own namespace only, and a ClusterRoleBinding in all of
// them (which the review across all namespaces answers), so a user may list
// proxies/leases in a namespace it may not list across all only where a
// RoleBinding names it, one of its groups or its ServiceAccount. It is a
// filter before the reviews, never a grant: a namespace it names is still
// reviewed, and a binding to a role that grants nothing costs one review.
//
// It reads no Role: what a role grants is the review's to answer. A grant
// made by an authorizer other than RBAC (a webhook) is seen only across all
// namespaces.
type RoleBindings struct {
	informer cache.SharedIndexInformer
}

// maxBindingSubjects bounds the subjects kept of one RoleBinding: the
// subjects after them are not seen (their viewers do not see the namespace
// through it), so that a tenant's RoleBinding of a million subjects costs
// the cache no more than a large real one.
const maxBindingSubjects = 1000

// subjectIndex indexes the cached RoleBindings by subject key.
const subjectIndex = "subject"

// NewRoleBindings makes the cache of informer, an informer of
// rbac.authorization.k8s.io RoleBindings that has not started: it sets
// the informer's transform and index.
func NewRoleBindings(informer cache.SharedIndexInformer) (*RoleBindings, error) {
	if err := informer.SetTransform(cachedRoleBinding); err != nil {
		return nil, fmt.Errorf("RoleBinding cache: %w", err)
	}
	err := informer.AddIndexers(cache.Indexers{subjectIndex: func(obj any) ([]string, error) {
		if b, ok := obj.(*boundSubjects); ok {
			return b.Keys, nil
		}
		return nil, nil
	}})
	if err != nil {
		return nil, fmt.Errorf("RoleBinding cache: %w", err)
	}
	return &RoleBindings{informer: informer}, nil
}

// Namespaces are the namespaces of the RoleBindings that name user, sorted.
func (r *RoleBindings) Namespaces(user auth.User) ([]string, bool) {
	if !r.informer.HasSynced() {
		return nil, false
	}
	var out []string
	for _, key := range userKeys(user) {
		bindings, err := r.informer.GetIndexer().ByIndex(subjectIndex, key)
		if err != nil { // the index exists: cannot happen
			return nil, false
		}
		for _, obj := range bindings {
			if b, ok := obj.(*boundSubjects); ok {
				out = append(out, b.Namespace)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), true
}

// boundSubjects is what the cache keeps of a RoleBinding: its identity and
// the keys of the subjects it names.
type boundSubjects struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Keys []string
}

func (b *boundSubjects) DeepCopyObject() runtime.Object {
	c := &boundSubjects{TypeMeta: b.TypeMeta, Keys: slices.Clone(b.Keys)}
	b.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return c
}

// cachedRoleBinding is the RoleBinding informer's transform: a RoleBinding
// becomes its boundSubjects; anything else (a tombstone) passes unchanged.
func cachedRoleBinding(obj any) (any, error) {
	rb, ok := obj.(*rbacv1.RoleBinding)
	if !ok {
		return obj, nil
	}
	b := &boundSubjects{ObjectMeta: metav1.ObjectMeta{
		Name: rb.Name, Namespace: rb.Namespace, UID: rb.UID, ResourceVersion: rb.ResourceVersion,
	}}
	for _, s := range rb.Subjects[:min(len(rb.Subjects), maxBindingSubjects)] {
		if key, ok := subjectKey(rb.Namespace, s); ok {
			b.Keys = append(b.Keys, key)
		}
	}
	slices.Sort(b.Keys)
	b.Keys = slices.Compact(b.Keys)
	return b, nil
}

// subjectKey is the key of a RoleBinding's subject as RBAC matches it: a
// User by name, a Group by name, a ServiceAccount by the user name of its
// tokens (its namespace defaults to the binding's). Other kinds match no
// one.
func subjectKey(bindingNamespace string, s rbacv1.Subject) (string, bool) {
	switch s.Kind {
	case rbacv1.UserKind:
		return hashKey("user", s.Name), true
	case rbacv1.GroupKind:
		return hashKey("group", s.Name), true
	case rbacv1.ServiceAccountKind:
		ns := s.Namespace
		if ns == "" {
			ns = bindingNamespace
		}
		return hashKey("user", "system:serviceaccount:"+ns+":"+s.Name), true
	}
	return "", false
}

// userKeys are the keys a RoleBinding naming user is indexed under.
func userKeys(u auth.User) []string {
	keys := []string{hashKey("user", u.Name)}
	for _, g := range u.Groups {
		keys = append(keys, hashKey("group", g))
	}
	return keys
}

// hashKey is a fixed-size key for a subject, whatever the length of its
// name: the cache holds 32 bytes per subject. Two names that collide cost
// one review more, never a grant (the review decides).
func hashKey(kind, name string) string {
	sum := sha256.Sum256([]byte(kind + "\x00" + name))
	return hex.EncodeToString(sum[:16])
}
