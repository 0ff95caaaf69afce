package kubernetes_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	podprovider "github.com/proxyfleet/proxy-operator/pkg/provider/kubernetes"
)

// TestNetworkPolicyOfAllowFrom: with spec.kubernetes.allowFrom the provider
// makes a NetworkPolicy (accepted by the real API server's validation) that
// selects only the instance's Pod and admits its port from the operator's
// and the gateway's Pods (one label) and the listed namespaces; a retried
// Create overwrites one left behind; Delete removes it; without the
// operator's namespace it refuses.
func TestNetworkPolicyOfAllowFrom(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	prov := podprovider.New(f.kube, podprovider.Options{OperatorNamespace: "proxy-operator"})
	ns := f.namespace(nil)
	p := f.proxy(ns, podProxy("p1", func(p *crawlv1alpha1.Proxy) {
		p.Spec.Kubernetes = &crawlv1alpha1.KubernetesProvider{Port: 8080, AllowFrom: &crawlv1alpha1.KubernetesAllowFrom{Namespaces: []string{"crawlers", "batch"}}}
	}))
	name := provider.InstanceName(p.UID)
	policies := f.kube.NetworkingV1().NetworkPolicies(ns)

	// Left by an earlier attempt, admitting everyone: overwritten.
	stale := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{}}}}
	if _, err := policies.Create(f.ctx, stale, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	inst, err := prov.Create(f.ctx, createRequest(p, nil))
	if err != nil {
		t.Fatal(err)
	}
	got, err := policies.Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tcp, port := corev1.ProtocolTCP, intstr.FromInt32(8080)
	nsPeer := func(n string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": n}}}
	}
	operator := nsPeer("proxy-operator")
	operator.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "proxy-operator"}}
	want := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{crawlv1alpha1.TagProxyUID: string(p.UID)}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			From:  []networkingv1.NetworkPolicyPeer{operator, nsPeer("crawlers"), nsPeer("batch")},
		}},
	}
	if diff := cmp.Diff(want, got.Spec, cmpopts.IgnoreFields(networkingv1.NetworkPolicySpec{}, "Egress")); diff != "" {
		t.Errorf("NetworkPolicy spec (-want +got):\n%s", diff)
	}
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != p.UID {
		t.Errorf("owner references %+v, want the Proxy", got.OwnerReferences)
	}
	pod, err := f.kube.CoreV1().Pods(ns).Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Labels[crawlv1alpha1.TagProxyUID] != string(p.UID) {
		t.Errorf("the policy's selector does not select the Pod: labels %v", pod.Labels)
	}

	if err := prov.Delete(f.ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := policies.Get(f.ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("NetworkPolicy after Delete: %v, want NotFound", err)
	}

	// The provider without the operator's namespace cannot admit its probes.
	_, err = f.prov.Create(f.ctx, createRequest(p, nil))
	if !errors.Is(provider.Class(err), provider.ErrPermanent) || !strings.Contains(err.Error(), "spec.kubernetes.allowFrom") {
		t.Errorf("Create without the operator's namespace: %v (class %v), want a permanent error naming spec.kubernetes.allowFrom", err, provider.Class(err))
	}
	if _, err := f.kube.CoreV1().Pods(ns).Get(f.ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Pod was made without its NetworkPolicy: %v", err)
	}
}

// TestNetworkPolicyOfEgress: every instance's Pod gets an egress policy
// before it is created, with or without allowFrom: DNS anywhere, and the
// ranges the forward-proxy's guard allows for spec.egress, one rule each
// (accepted by the real API server's validation).
func TestNetworkPolicyOfEgress(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ns := f.namespace(nil)
	p := f.proxy(ns, podProxy("p1", func(p *crawlv1alpha1.Proxy) {
		p.Spec.Egress = &crawlv1alpha1.ProxyEgress{
			AllowCIDRs: []crawlv1alpha1.CIDR{"10.244.0.0/16"},
			DenyCIDRs:  []crawlv1alpha1.CIDR{"10.244.9.0/24", "8.8.8.8/32"},
		}
	}))
	if _, err := f.prov.Create(f.ctx, createRequest(p, nil)); err != nil {
		t.Fatal(err)
	}
	got, err := f.kube.NetworkingV1().NetworkPolicies(ns).Get(f.ctx, provider.InstanceName(p.UID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, got.Spec.PolicyTypes); diff != "" {
		t.Errorf("policy types (-want +got):\n%s", diff)
	}
	udp, tcp, dns := corev1.ProtocolUDP, corev1.ProtocolTCP, intstr.FromInt32(53)
	if diff := cmp.Diff(networkingv1.NetworkPolicyEgressRule{
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
	}, got.Spec.Egress[0]); diff != "" {
		t.Errorf("the first rule is not DNS anywhere (-want +got):\n%s", diff)
	}
	blocks := map[string][]string{}
	for _, r := range got.Spec.Egress[1:] {
		if len(r.To) != 1 || r.To[0].IPBlock == nil || len(r.Ports) != 0 {
			t.Fatalf("rule %+v: want one ipBlock on every port", r)
		}
		blocks[r.To[0].IPBlock.CIDR] = r.To[0].IPBlock.Except
	}
	if diff := cmp.Diff([]string{"10.244.9.0/24"}, blocks["10.244.0.0/16"]); diff != "" {
		t.Errorf("10.244.0.0/16 (spec.egress.allowCIDRs) excepts (-want +got):\n%s", diff)
	}
	for _, want := range []string{"8.8.8.8/32", "10.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8", "100.64.0.0/10"} {
		if !slices.Contains(blocks["0.0.0.0/0"], want) {
			t.Errorf("0.0.0.0/0 does not except %s: %v", want, blocks["0.0.0.0/0"])
		}
	}
	for _, want := range []string{"fc00::/7", "fe80::/10"} {
		if !slices.Contains(blocks["::/0"], want) {
			t.Errorf("::/0 does not except %s: %v", want, blocks["::/0"])
		}
	}
	if len(blocks) != 3 {
		t.Errorf("ipBlocks %v, want 0.0.0.0/0, ::/0 and 10.244.0.0/16", blocks)
	}
}
