package kubernetes

import (
	"context"
	"errors"
	"maps"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// OperatorPodLabels select the operator's own Pods (artifacts/deploy), which
// a NetworkPolicy of spec.kubernetes.allowFrom admits so that they can probe.
var OperatorPodLabels = map[string]string{"app.kubernetes.io/name": "proxy-operator"}

// namespaceNameLabel is set by the API server on every namespace.
const namespaceNameLabel = corev1.LabelMetadataName

// buildNetworkPolicy returns the NetworkPolicy of an instance whose Proxy
// sets spec.kubernetes.allowFrom, nil when it does not. Pure. It selects the
// instance's Pod by its proxy-uid label and admits the proxy port from the
// operator's Pods and the listed namespaces only.
func buildNetworkPolicy(req provider.CreateRequest, pod *corev1.Pod, opts Options) (*networkingv1.NetworkPolicy, error) {
	spec := req.Proxy.Spec.Kubernetes
	if spec == nil || spec.AllowFrom == nil {
		return nil, nil
	}
	if opts.OperatorNamespace == "" {
		return nil, errors.New("spec.kubernetes.allowFrom needs the operator's namespace (--pod-namespace or $POD_NAMESPACE) to admit the operator's probes")
	}
	peers := []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{namespaceNameLabel: opts.OperatorNamespace}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: maps.Clone(OperatorPodLabels)},
	}}
	for _, ns := range spec.AllowFrom.Namespaces {
		peers = append(peers, networkingv1.NetworkPolicyPeer{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{namespaceNameLabel: ns}},
		})
	}
	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(proxyPort(pod))
	uid := crawlv1alpha1.TagProxyUID
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:            pod.Name,
			Namespace:       pod.Namespace,
			Labels:          maps.Clone(pod.Labels),
			OwnerReferences: []metav1.OwnerReference{ownerRef(req.Proxy)},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{uid: pod.Labels[uid]}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
				From:  peers,
			}},
		},
	}, nil
}

// ensureNetworkPolicy creates the policy before the Pod, so that the Pod is
// never reachable without it. One left by an earlier attempt (a lost answer,
// a crash) is overwritten with an unconditional update: no read, and no
// moment without a policy.
func (p *Provider) ensureNetworkPolicy(ctx context.Context, want *networkingv1.NetworkPolicy) error {
	policies := p.client.NetworkingV1().NetworkPolicies(want.Namespace)
	_, err := policies.Create(ctx, want, metav1.CreateOptions{FieldManager: p.opts.FieldManager})
	if apierrors.IsAlreadyExists(err) {
		_, err = policies.Update(ctx, want, metav1.UpdateOptions{FieldManager: p.opts.FieldManager})
		if err != nil {
			return classify(err, "updating NetworkPolicy %s", klog.KObj(want))
		}
		return nil
	}
	if err != nil {
		return classify(err, "creating NetworkPolicy %s", klog.KObj(want))
	}
	klog.FromContext(ctx).V(2).Info("Created NetworkPolicy", "networkPolicy", klog.KObj(want), "allowFrom", len(want.Spec.Ingress[0].From)-1)
	return nil
}
