// Package kubernetes is the Pod provider: each Managed proxy instance is a Pod
// running the forward-proxy image in the Proxy's namespace, with its
// cloud-init delivered as a mounted file from a Secret the provider owns and
// its credentials taken from the Proxy's auth Secret by reference.
//
// buildPod and podInstance are pure (spec → Pod, Pod → Instance); the
// Provider methods are thin I/O around them. Instance IDs are
// "namespace/name"; the name is the instance name the controller derives
// from the Proxy UID, so Create is idempotent by name.
//
// It never watches Pods: the controller polls Get, as it would a cloud API
// without watches. It does not schedule, probe or garbage-collect anything
// itself: the cluster runs the Pod and its readiness probe, pkg/health probes
// through the proxy, pkg/gc collects orphans through ListByTag.
package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// DefaultImage is the forward-proxy image run when neither
// spec.kubernetes.image nor Options.DefaultImage says otherwise: the one
// `make image` builds (hack/image), tagged with the VERSION file, which a test
// keeps this in step with.
// A custom image must accept forward-proxy's flags (--listen, --name,
// --cloud-init) and environment (PROXY_USERNAME, PROXY_PASSWORD) and serve
// GET /healthz on the proxy port.
const DefaultImage = "ghcr.io/proxyfleet/forward-proxy:v0.1.0"

// DefaultFieldManager names the provider's writes in managedFields.
const DefaultFieldManager = "proxy-operator"

// listPageSize bounds one page of ListByTag, so a large fleet is listed in
// pieces the API server can serve cheaply.
const listPageSize = 500

// Options configures a Provider. The zero value uses the defaults.
type Options struct {
	// DefaultImage is the proxy image of Pods whose spec.kubernetes.image is
	// empty (the operator's --kubernetes-default-image). Default DefaultImage.
	DefaultImage string

	// OperatorNamespace is the namespace of the operator's own Pods (the
	// operator's --pod-namespace), which the NetworkPolicy of
	// spec.kubernetes.allowFrom admits. Without it such Proxies fail.
	OperatorNamespace string
	// FieldManager names the provider's writes. Default DefaultFieldManager.
	FieldManager string
}

func (o Options) withDefaults() Options {
	if o.DefaultImage == "" {
		o.DefaultImage = DefaultImage
	}
	if o.FieldManager == "" {
		o.FieldManager = DefaultFieldManager
	}
	return o
}

// Provider runs proxy instances as Pods. It is safe for concurrent use.
type Provider struct {
	client kubernetes.Interface
	opts   Options
}

var _ provider.Provider = (*Provider)(nil)

// New returns a Provider that creates Pods with client. The client needs
// create/get/delete on pods and secrets in the Proxies' namespaces, and list
// on pods cluster-wide (ListByTag).
func New(client kubernetes.Interface, opts Options) *Provider {
	return &Provider{client: client, opts: opts.withDefaults()}
}

// Create creates the NetworkPolicy (egress always, ingress when
// spec.kubernetes.allowFrom is set), the cloud-init Secret (when there is
// cloud-init) and then the Pod. A Pod of that name that already exists is returned as it is, if
// it serves the same Proxy.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	if req.Proxy == nil || req.Name == "" {
		return provider.Instance{}, provider.Permanent(errors.New("kubernetes provider: a create request needs a name and a Proxy"))
	}
	pod, secret := buildPod(req, p.opts)
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod))
	policy, err := buildNetworkPolicy(req, pod, p.opts)
	if err != nil {
		return provider.Instance{}, provider.Permanent(fmt.Errorf("kubernetes provider: %w", err))
	}
	if err := p.ensureNetworkPolicy(ctx, policy); err != nil {
		return provider.Instance{}, err
	}
	if secret != nil {
		if err := p.ensureSecret(ctx, secret); err != nil {
			return provider.Instance{}, err
		}
	}
	created, err := p.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: p.opts.FieldManager})
	if apierrors.IsAlreadyExists(err) {
		existing, getErr := p.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if getErr != nil {
			return provider.Instance{}, classify(getErr, "reading existing Pod %s", klog.KObj(pod))
		}
		if uid := crawlv1alpha1.TagProxyUID; existing.Labels[uid] != pod.Labels[uid] {
			return provider.Instance{}, provider.Permanent(fmt.Errorf("pod %s exists and does not belong to this Proxy (label %s=%q)",
				klog.KObj(pod), uid, existing.Labels[uid]))
		}
		logger.V(2).Info("Pod exists; adopting it")
		return podInstance(existing), nil
	}
	if err != nil {
		return provider.Instance{}, classify(err, "creating Pod %s", klog.KObj(pod))
	}
	logger.V(2).Info("Created Pod", "image", pod.Spec.Containers[0].Image)
	return podInstance(created), nil
}

// ensureSecret creates the cloud-init Secret, or brings an existing one (left
// by a Create that failed after it) to the wanted content.
func (p *Provider) ensureSecret(ctx context.Context, want *corev1.Secret) error {
	secrets := p.client.CoreV1().Secrets(want.Namespace)
	_, err := secrets.Create(ctx, want, metav1.CreateOptions{FieldManager: p.opts.FieldManager})
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return classify(err, "creating cloud-init Secret %s", klog.KObj(want))
		}
		return nil
	}
	existing, err := secrets.Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		return classify(err, "reading cloud-init Secret %s", klog.KObj(want))
	}
	if uid := crawlv1alpha1.TagProxyUID; existing.Labels[uid] != want.Labels[uid] {
		return provider.Permanent(fmt.Errorf("secret %s exists and does not belong to this Proxy (label %s=%q)",
			klog.KObj(want), uid, existing.Labels[uid]))
	}
	if bytes.Equal(existing.Data[CloudInitKey], want.Data[CloudInitKey]) && len(existing.Data) == 1 &&
		maps.Equal(existing.Labels, want.Labels) {
		return nil
	}
	existing.Labels, existing.Annotations, existing.Data = want.Labels, want.Annotations, want.Data
	if _, err := secrets.Update(ctx, existing, metav1.UpdateOptions{FieldManager: p.opts.FieldManager}); err != nil {
		return classify(err, "updating cloud-init Secret %s", klog.KObj(want))
	}
	return nil
}

// Get observes the Pod with this ID.
func (p *Provider) Get(ctx context.Context, id string) (provider.Instance, error) {
	namespace, name, ok := splitID(id)
	if !ok {
		// No Pod can have this ID; saying so lets the controller move on.
		return provider.Instance{}, fmt.Errorf("instance %q is not namespace/name: %w", id, provider.ErrNotFound)
	}
	pod, err := p.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return provider.Instance{}, fmt.Errorf("pod %s: %w", id, provider.ErrNotFound)
	}
	if err != nil {
		return provider.Instance{}, classify(err, "reading Pod %s", id)
	}
	return podInstance(pod), nil
}

// Delete deletes the Pod (gracefully: the proxy drains its tunnels), its
// cloud-init Secret and its NetworkPolicy; any being gone already is fine.
func (p *Provider) Delete(ctx context.Context, id string) error {
	namespace, name, ok := splitID(id)
	if !ok {
		return nil
	}
	err := p.client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return classify(err, "deleting Pod %s", id)
	}
	// The Secret may go while the Pod drains: the kubelet mounted it at start.
	err = p.client.CoreV1().Secrets(namespace).Delete(ctx, CloudInitSecretName(name), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return classify(err, "deleting cloud-init Secret %s/%s", namespace, CloudInitSecretName(name))
	}
	// The NetworkPolicy is named like the Pod (one made by an earlier
	// release may be missing); the Pod is terminating by now.
	err = p.client.NetworkingV1().NetworkPolicies(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return classify(err, "deleting NetworkPolicy %s/%s", namespace, name)
	}
	klog.FromContext(ctx).V(2).Info("Deleted Pod", "pod", klog.KRef(namespace, name))
	return nil
}

// ListByTag lists, in every namespace, the Pods labelled with the tag.
func (p *Provider) ListByTag(ctx context.Context, key, value string) ([]provider.Instance, error) {
	req, err := labels.NewRequirement(key, selection.Equals, []string{labelValue(value)})
	if err != nil {
		return nil, provider.Permanent(fmt.Errorf("tag %s=%q cannot be a label selector: %w", key, value, err))
	}
	opts := metav1.ListOptions{LabelSelector: labels.NewSelector().Add(*req).String(), Limit: listPageSize}
	var out []provider.Instance
	for {
		list, err := p.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, classify(err, "listing Pods with %s", opts.LabelSelector)
		}
		for i := range list.Items {
			inst := podInstance(&list.Items[i])
			// A shortened label value could in theory be shared; the full
			// value in the tags decides.
			if inst.Tags[key] == value {
				out = append(out, inst)
			}
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}
