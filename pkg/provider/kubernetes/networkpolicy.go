package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// OperatorPodLabels select, in the operator's namespace, the Pods that reach
// every proxy Pod: the operator's (it probes through the proxy) and the
// gateway tier's (it relays crawlers' requests). Every install sets this
// label on both, whatever the release is called: the chart (Helm's
// convention: the name is the chart's, app.kubernetes.io/instance the
// release's) and artifacts/'s kustomize base; app.kubernetes.io/component
// tells them apart (docs/decisions/0283-helm-labels-name-the-chart.md).
var OperatorPodLabels = map[string]string{"app.kubernetes.io/name": "proxy-operator"}

// namespaceNameLabel is set by the API server on every namespace.
const namespaceNameLabel = corev1.LabelMetadataName

// buildNetworkPolicy returns the NetworkPolicy of an instance, named like its
// Pod and selecting it by its proxy-uid label. Pure.
//
// Egress, always: the forward-proxy's egress guard a second time, enforced
// by the cluster's network (where its network plugin enforces policies):
// the addresses the guard allows for spec.egress, and DNS (port 53) anywhere
// (docs/decisions/0282-proxy-pods-egress-policy.md).
//
// Ingress, with spec.kubernetes.allowFrom: the proxy port from the
// operator's and the gateway's Pods and from the listed namespaces only.
func buildNetworkPolicy(req provider.CreateRequest, pod *corev1.Pod, opts Options) (*networkingv1.NetworkPolicy, error) {
	egress, err := egressRules(req.Proxy.Spec.Egress)
	if err != nil {
		return nil, err
	}
	uid := crawlv1alpha1.TagProxyUID
	policy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:            pod.Name,
			Namespace:       pod.Namespace,
			Labels:          maps.Clone(pod.Labels),
			OwnerReferences: []metav1.OwnerReference{ownerRef(req.Proxy)},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{uid: pod.Labels[uid]}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      egress,
		},
	}
	spec := req.Proxy.Spec.Kubernetes
	if spec == nil || spec.AllowFrom == nil {
		return policy, nil
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
	policy.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	policy.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
		From:  peers,
	}}
	return policy, nil
}

// egressRules: DNS to any address, then one rule per range the guard
// allows. One rule each, rather than one rule of many ipBlocks: network
// plugins that put a rule's ipBlocks into one set (kube-router) would
// otherwise let an exception of one range cancel another range equal to it.
func egressRules(spec *crawlv1alpha1.ProxyEgress) ([]networkingv1.NetworkPolicyEgressRule, error) {
	guard, err := egressPolicy(spec)
	if err != nil {
		return nil, err
	}
	udp, tcp, dns := corev1.ProtocolUDP, corev1.ProtocolTCP, intstr.FromInt32(53)
	rules := []networkingv1.NetworkPolicyEgressRule{{
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
	}}
	for _, r := range guard.AllowedRanges() {
		block := &networkingv1.IPBlock{CIDR: r.Prefix.String()}
		for _, e := range r.Except {
			block.Except = append(block.Except, e.String())
		}
		rules = append(rules, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: block}}})
	}
	return rules, nil
}

// egressPolicy is the guard forward-proxy runs with for spec.egress (its
// --allow-cidr and --deny-cidr flags, provider.EgressArgs).
func egressPolicy(spec *crawlv1alpha1.ProxyEgress) (forwardproxy.EgressPolicy, error) {
	if spec == nil {
		return forwardproxy.EgressPolicy{}, nil
	}
	parse := func(field string, in []crawlv1alpha1.CIDR) ([]netip.Prefix, error) {
		var out []netip.Prefix
		for i, c := range in {
			pfx, err := forwardproxy.ParseCIDR(string(c))
			if err != nil {
				return nil, fmt.Errorf("spec.egress.%s[%d]: %w", field, i, err)
			}
			out = append(out, pfx)
		}
		return out, nil
	}
	allow, err := parse("allowCIDRs", spec.AllowCIDRs)
	if err != nil {
		return forwardproxy.EgressPolicy{}, err
	}
	deny, err := parse("denyCIDRs", spec.DenyCIDRs)
	if err != nil {
		return forwardproxy.EgressPolicy{}, err
	}
	return forwardproxy.NewEgressPolicy(allow, deny)
}

// ensureNetworkPolicy creates the policy before the Pod, so that the Pod is
// never running without it. One left by an earlier attempt (a lost answer,
// a crash, or an ingress-only one of an earlier release) is overwritten with
// an unconditional update: no read, and no moment without a policy.
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
	klog.FromContext(ctx).V(2).Info("Created NetworkPolicy", "networkPolicy", klog.KObj(want), "types", want.Spec.PolicyTypes, "egressRanges", len(want.Spec.Egress)-1)
	return nil
}
