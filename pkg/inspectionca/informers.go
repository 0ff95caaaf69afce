package inspectionca

import (
	"crypto/sha256"
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/proxyfleet/proxy-operator/pkg/inspection"
)

// Selector is the label selector of the Secrets and ConfigMaps the
// controller's informers watch.
var Selector = labels.SelectorFromSet(labels.Set{inspection.CALabel: "true"}).String()

// bundleFieldSelector narrows the published bundles to the one name the
// controller gives them: the label alone is any tenant's to put on any
// ConfigMap of its namespace, and each such ConfigMap would be cached.
var bundleFieldSelector = fields.OneTermEqualSelector("metadata.name", inspection.BundleConfigMap).String()

// Informers are the controller's caches, each narrowed to what it reads
// (docs/decisions/0421-informers-keep-only-what-they-read.md).
type Informers struct {
	// Namespaces: every Namespace (their labels opt in).
	Namespaces informers.SharedInformerFactory
	// Secrets: the CA Secrets, label inspection.CALabel, in the operator's
	// namespace, which tenants cannot write.
	Secrets informers.SharedInformerFactory
	// Bundles: the ConfigMaps named inspection.BundleConfigMap with label
	// inspection.CALabel, in every namespace, each kept as the digest of
	// its content (cachedBundle): a tenant's ConfigMap of that name costs
	// the leader a few hundred bytes, whatever it holds.
	Bundles informers.SharedInformerFactory
}

// NewInformers makes the controller's informers; Config takes their
// Namespaces, Secrets and ConfigMaps.
func NewInformers(kube kubernetes.Interface, operatorNamespace string) Informers {
	byLabel := informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = Selector })
	return Informers{
		Namespaces: informers.NewSharedInformerFactory(kube, 0),
		Secrets:    informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(operatorNamespace), byLabel),
		Bundles: informers.NewSharedInformerFactoryWithOptions(kube, 0,
			informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
				lo.LabelSelector, lo.FieldSelector = Selector, bundleFieldSelector
			}),
			informers.WithTransform(cachedBundle)),
	}
}

// All are the three factories, to start and shut down.
func (i Informers) All() []informers.SharedInformerFactory {
	return []informers.SharedInformerFactory{i.Namespaces, i.Secrets, i.Bundles}
}

// cachedDigestAnnotation holds, in the cache only (never on the server),
// the digest of a bundle ConfigMap's content.
const cachedDigestAnnotation = "inspectionca.crawl.proxyfleet.io/cached-content-sha256"

// cachedBundle is the bundles informer's transform: a ConfigMap becomes its
// name, its inspection.CALabel (remove deletes only what carries it) and
// the digest of its content, which publish compares. Anything else (a
// tombstone) passes unchanged.
func cachedBundle(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj, nil
	}
	kept := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: cm.Name, Namespace: cm.Namespace, UID: cm.UID, ResourceVersion: cm.ResourceVersion,
		Annotations: map[string]string{cachedDigestAnnotation: contentDigest(cm.Data, cm.BinaryData)},
	}}
	if v, ok := cm.Labels[inspection.CALabel]; ok {
		kept.Labels = map[string]string{inspection.CALabel: v}
	}
	return kept, nil
}

// bundleDigest is the digest of a ConfigMap's content as the cache keeps
// it, computed when the cache kept the whole object.
func bundleDigest(cm *corev1.ConfigMap) string {
	if d, ok := cm.Annotations[cachedDigestAnnotation]; ok {
		return d
	}
	return contentDigest(cm.Data, cm.BinaryData)
}

// contentDigest identifies a bundle ConfigMap's content: the SHA-256 of
// its one key's value when it holds only inspection.BundleKey, "" for any
// other content (never a bundle's digest, so publish rewrites it).
func contentDigest(data map[string]string, binary map[string][]byte) string {
	bundle, ok := data[inspection.BundleKey]
	if !ok || len(data) != 1 || len(binary) != 0 {
		return ""
	}
	return digestOf([]byte(bundle))
}

func digestOf(bundle []byte) string {
	sum := sha256.Sum256(bundle)
	return hex.EncodeToString(sum[:])
}
