package controller_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/operator"
)

// pinnedHash is the spec-hash annotation the operator writes for a spec,
// a resolved cloud-init and a credentials digest: with the providers
// compiled in.
func pinnedHash(spec crawlv1alpha1.ProxySpec, cloudInit []byte, credentialsDigest string) string {
	return controller.SpecHash(operator.BuiltinProviders(), spec, cloudInit, credentialsDigest)
}

// TestSpecHashesArePinned: the spec hash of an existing Proxy never
// changes with an upgrade of the operator, or every instance of the fleet
// is replaced at once. These values were computed by the operator before
// providers registered themselves (record 0440) and must stay as they are;
// a spec of a new shape (a new provider, a new field) may hash to anything.
// A failure here is an upgrade that replaces a fleet: fix the code, never
// the table.
func TestSpecHashesArePinned(t *testing.T) {
	managed := func(p crawlv1alpha1.ProviderName, mods ...func(*crawlv1alpha1.ProxySpec)) crawlv1alpha1.ProxySpec {
		s := crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: p, MaxLeases: 1,
			HealthCheck: crawlv1alpha1.HealthCheck{URL: "https://www.gstatic.com/generate_204", ExpectedStatus: 204}}
		for _, mod := range mods {
			mod(&s)
		}
		return s
	}
	inline := func(s string) *crawlv1alpha1.CloudInit { return &crawlv1alpha1.CloudInit{Inline: &s} }
	auth := &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: "proxy-auth"}}
	egress := &crawlv1alpha1.ProxyEgress{AllowCIDRs: []crawlv1alpha1.CIDR{"10.0.0.0/8"}, DenyCIDRs: []crawlv1alpha1.CIDR{"10.1.0.0/16"}}
	const digest = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
	userData := []byte("#cloud-config\nruncmd: [forward-proxy]\n")
	tests := map[string]struct {
		spec        crawlv1alpha1.ProxySpec
		cloudInit   []byte
		credentials string
		want        string
	}{
		"kubernetes, no block": {spec: managed(crawlv1alpha1.ProviderKubernetes), want: "5c83dc7d31794d14"},
		"kubernetes, every field": {spec: managed(crawlv1alpha1.ProviderKubernetes, func(s *crawlv1alpha1.ProxySpec) {
			s.Kubernetes = &crawlv1alpha1.KubernetesProvider{Image: "ghcr.io/proxyfleet/forward-proxy:v1.4.0", Port: 3128,
				Resources: &corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}},
				NodeSelector: map[string]string{"zone": "b", "pool": "egress"},
				Tolerations:  []corev1.Toleration{{Key: "egress", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				AllowFrom:    &crawlv1alpha1.KubernetesAllowFrom{Namespaces: []string{"crawlers"}}}
			s.Auth, s.Egress = auth, egress
		}), credentials: digest, want: "c0798729e093ca52"},
		"local, exit ranges": {spec: managed(crawlv1alpha1.ProviderLocal, func(s *crawlv1alpha1.ProxySpec) {
			s.Local = &crawlv1alpha1.LocalProvider{ExitRanges: []crawlv1alpha1.CIDR{"2001:db8::/64"}}
		}), want: "b561875eac8f51c2"},
		"local, empty block, generated credentials": {spec: managed(crawlv1alpha1.ProviderLocal, func(s *crawlv1alpha1.ProxySpec) {
			s.Local = &crawlv1alpha1.LocalProvider{}
		}), credentials: digest, want: "72c95eff1563bb7f"},
		"gce, cloud-init": {spec: managed(crawlv1alpha1.ProviderGCE, func(s *crawlv1alpha1.ProxySpec) {
			s.GCE = &crawlv1alpha1.GCEProvider{Project: "crawl-prod", Zone: "europe-west1-b", MachineType: "e2-micro",
				SourceImage: "projects/debian-cloud/global/images/family/debian-12", Network: "egress", Subnetwork: "egress-ew1",
				NetworkTags: []string{"proxy"}, Spot: true, IPv6ExitRange: true, Port: 3128}
			s.CloudInit = inline(string(userData))
		}), cloudInit: userData, credentials: digest, want: "60d2d7f923ea4fa7"},
		"aws": {spec: managed(crawlv1alpha1.ProviderAWS, func(s *crawlv1alpha1.ProxySpec) {
			s.AWS = &crawlv1alpha1.AWSProvider{Region: "eu-west-1", InstanceTypes: []string{"t4g.nano", "t3.nano"},
				SubnetIDs: []string{"subnet-0a", "subnet-0b"}, SecurityGroupIDs: []string{"sg-01"}, AllowFrom: []crawlv1alpha1.CIDR{"203.0.113.0/24"},
				Image: &crawlv1alpha1.AWSImage{SSMParameter: "/aws/service/debian/release/12/latest/arm64"},
				Spot:  &crawlv1alpha1.AWSSpot{MaxPrice: "0.004"}, IPv6ExitRange: true, Port: 3128}
			s.CloudInit = &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: "user-data", Key: "user-data"}}
		}), cloudInit: userData, credentials: digest, want: "a8c03fdda96af439"},
		"hetzner": {spec: managed(crawlv1alpha1.ProviderHetzner, func(s *crawlv1alpha1.ProxySpec) {
			s.Hetzner = &crawlv1alpha1.HetznerProvider{Location: "fsn1", ServerTypes: []string{"cx22", "cpx11"}, Image: "debian-12",
				FirewallIDs: []int64{42}, AllowFrom: []crawlv1alpha1.CIDR{"198.51.100.0/24"}, PublicIPv6: true, IPv6ExitRange: true, Port: 3128}
		}), credentials: digest, want: "9e31eb50a37676b6"},
		"digitalocean": {spec: managed(crawlv1alpha1.ProviderDigitalOcean, func(s *crawlv1alpha1.ProxySpec) {
			s.DigitalOcean = &crawlv1alpha1.DigitalOceanProvider{Region: "ams3", Sizes: []string{"s-1vcpu-512mb-10gb"}, Image: "debian-12-x64",
				Tags: []string{"egress"}, VPCUUID: "5a4981aa-9653-4bd1-bef5-d6bff52042e4", AllowFrom: []crawlv1alpha1.CIDR{"192.0.2.0/24"}, IPv6: true, Port: 3128}
			s.Egress = egress
		}), credentials: digest, want: "3428a0cb6a2b4da5"},
		"azure": {spec: managed(crawlv1alpha1.ProviderAzure, func(s *crawlv1alpha1.ProxySpec) {
			s.Azure = &crawlv1alpha1.AzureProvider{Location: "westeurope", VMSizes: []string{"Standard_B1s", "Standard_B1ls"},
				Image:     &crawlv1alpha1.AzureImage{Publisher: "Debian", Offer: "debian-12", SKU: "12-gen2", Version: "latest"},
				SubnetID:  "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/proxies",
				AllowFrom: []crawlv1alpha1.CIDR{"192.0.2.0/24"}, Port: 3128}
			s.Auth = auth
		}), credentials: digest, want: "e513b6ab95e8e55c"},
		"upstream: its block is in no hash": {spec: managed(crawlv1alpha1.ProviderUpstream, func(s *crawlv1alpha1.ProxySpec) {
			s.Upstream = &crawlv1alpha1.UpstreamProvider{Endpoint: crawlv1alpha1.Endpoint{Host: "super.example.net", Port: 22225},
				CredentialsSecretRef: crawlv1alpha1.LocalSecretRef{Name: "network"}, UsernameTemplate: "acme-country-{country}-session-{session}",
				Countries: []string{"de", "fr"}, SessionLifetime: &metav1.Duration{Duration: 600_000_000_000}}
		}), want: "eb5f86b039cb3ad2"},
		"session": {spec: managed(crawlv1alpha1.ProviderSession, func(s *crawlv1alpha1.ProxySpec) {
			s.Session = &crawlv1alpha1.SessionProvider{Instance: "ranged-0", Endpoint: crawlv1alpha1.Endpoint{Host: "10.0.0.7", Port: 3128},
				CredentialsSecretRef: crawlv1alpha1.LocalSecretRef{Name: "ranged-0-credentials"}}
		}), want: "269dc861d882cecc"},
		"external": {spec: crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeExternal, MaxLeases: 4,
			Endpoint: &crawlv1alpha1.Endpoint{Host: "proxy.example.com", Port: 8443, Scheme: crawlv1alpha1.SchemeHTTPS},
			Auth:     auth, ExitRanges: []crawlv1alpha1.CIDR{"2001:db8:1::/48"}}, credentials: digest, want: "17bbdd1293525b8f"},
		"no mode (before defaulting)": {spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderKubernetes}, want: "678861a0f8c1c1e5"},
		// Two blocks: the CRD admits no such spec today, but one stored
		// before a block's rule existed hashes as it did.
		"kubernetes and a stray gce block": {spec: managed(crawlv1alpha1.ProviderKubernetes, func(s *crawlv1alpha1.ProxySpec) {
			s.Kubernetes = &crawlv1alpha1.KubernetesProvider{Port: 3128}
			s.GCE = &crawlv1alpha1.GCEProvider{MachineType: "e2-micro"}
			s.HealthCheck.Interval = &metav1.Duration{Duration: 10_000_000_000}
			s.MaxLeases = 3
		}), want: "5345c09b74801b6b"},
	}
	got, want := map[string]string{}, map[string]string{}
	for name, tc := range tests {
		got[name], want[name] = pinnedHash(tc.spec, tc.cloudInit, tc.credentials), tc.want
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spec hashes (-pinned +now):\n%s", diff)
	}
}
