package v1alpha1_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// specOptions compares specs and statuses the way the API server stores them.
var specOptions = cmp.Options{
	cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 }),
	cmp.Comparer(func(a, b metav1.Time) bool { return a.Time.Equal(b.Time) }),
}

// withDocumentedDefaults fills in what the CRD documents as defaults. It is
// written out here, independently of the schema, so the test catches a
// default that changed or went missing.
func withDocumentedDefaults(s crawlv1alpha1.ProxySpec) crawlv1alpha1.ProxySpec {
	s = *s.DeepCopy()
	if s.Mode == "" {
		s.Mode = crawlv1alpha1.ModeManaged
	}
	if s.MaxLeases == 0 {
		s.MaxLeases = 1
	}
	hc := &s.HealthCheck
	if hc.URL == "" {
		hc.URL = "https://www.gstatic.com/generate_204"
	}
	if hc.ExpectedStatus == 0 {
		hc.ExpectedStatus = 204
	}
	if hc.Interval == nil {
		hc.Interval = &metav1.Duration{Duration: 30 * time.Second}
	}
	if hc.Timeout == nil {
		hc.Timeout = &metav1.Duration{Duration: 5 * time.Second}
	}
	if hc.SuccessThreshold == 0 {
		hc.SuccessThreshold = 1
	}
	if hc.FailureThreshold == 0 {
		hc.FailureThreshold = 3
	}
	if k := s.Kubernetes; k != nil && k.Port == 0 {
		k.Port = 3128
	}
	if g := s.GCE; g != nil {
		if g.MachineType == "" {
			g.MachineType = "e2-micro"
		}
		if g.SourceImage == "" {
			g.SourceImage = "projects/debian-cloud/global/images/family/debian-12"
		}
		if g.Port == 0 {
			g.Port = 3128
		}
	}
	if a := s.AWS; a != nil {
		if len(a.InstanceTypes) == 0 {
			a.InstanceTypes = []string{"t3.micro"}
		}
		if a.Port == 0 {
			a.Port = 3128
		}
	}
	if h := s.Hetzner; h != nil {
		if len(h.ServerTypes) == 0 {
			h.ServerTypes = []string{"cx22"}
		}
		if h.Image == "" {
			h.Image = "debian-12"
		}
		if h.Port == 0 {
			h.Port = 3128
		}
	}
	if d := s.DigitalOcean; d != nil {
		if len(d.Sizes) == 0 {
			d.Sizes = []string{"s-1vcpu-512mb-10gb"}
		}
		if d.Image == "" {
			d.Image = "debian-12-x64"
		}
		if d.Port == 0 {
			d.Port = 3128
		}
	}
	if a := s.Azure; a != nil {
		if len(a.VMSizes) == 0 {
			a.VMSizes = []string{"Standard_B1s"}
		}
		if a.Image != nil && a.Image.Version == "" {
			a.Image.Version = "latest"
		}
		if a.Port == 0 {
			a.Port = 3128
		}
	}
	if u := s.Upstream; u != nil {
		if u.Endpoint.Scheme == "" {
			u.Endpoint.Scheme = crawlv1alpha1.SchemeHTTP
		}
		if u.SessionLifetime == nil {
			u.SessionLifetime = &metav1.Duration{Duration: 10 * time.Minute}
		}
	}
	if c := s.CloudInit; c != nil && c.SecretRef != nil && c.SecretRef.Key == "" {
		c.SecretRef.Key = "user-data"
	}
	if e := s.Endpoint; e != nil && e.Scheme == "" {
		e.Scheme = crawlv1alpha1.SchemeHTTP
	}
	return s
}

// TestExamplesAreAcceptedWithDefaults creates every manifest in examples/ and
// checks that the server filled in the documented defaults and nothing else.
func TestExamplesAreAcceptedWithDefaults(t *testing.T) {
	env := apiServer.Get(t)
	ctx := context.Background()
	ns := newNamespace(t)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	crawl := versioned.NewForConfigOrDie(env.Config)

	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(t), "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	proxies := 0
	for _, file := range files {
		for i, doc := range splitYAML(t, file) {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s doc %d: %v", file, i, err)
			}
			switch meta.Kind {
			case "Secret":
				var s corev1.Secret
				if err := yaml.UnmarshalStrict(doc, &s); err != nil {
					t.Fatalf("%s doc %d: %v", file, i, err)
				}
				if _, err := kube.CoreV1().Secrets(ns).Create(ctx, &s, metav1.CreateOptions{}); err != nil {
					t.Errorf("%s: creating Secret %s: %v", file, s.Name, err)
				}
			case "Proxy":
				proxies++
				var p crawlv1alpha1.Proxy
				if err := yaml.UnmarshalStrict(doc, &p); err != nil {
					t.Fatalf("%s doc %d: %v", file, i, err)
				}
				created, err := crawl.CrawlV1alpha1().Proxies(ns).Create(ctx, &p, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
				if err != nil {
					t.Errorf("%s: creating Proxy %s: %v", file, p.Name, err)
					continue
				}
				if diff := cmp.Diff(withDocumentedDefaults(p.Spec), created.Spec, specOptions); diff != "" {
					t.Errorf("%s: Proxy %s spec after defaulting (-want +got):\n%s", file, p.Name, diff)
				}
			case "ProxyPool":
				var p crawlv1alpha1.ProxyPool
				if err := yaml.UnmarshalStrict(doc, &p); err != nil {
					t.Fatalf("%s doc %d: %v", file, i, err)
				}
				if _, err := crawl.CrawlV1alpha1().ProxyPools(ns).Create(ctx, &p, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
					t.Errorf("%s: creating ProxyPool %s: %v", file, p.Name, err)
				}
			case "CrawlPolicy":
				var p crawlv1alpha1.CrawlPolicy
				if err := yaml.UnmarshalStrict(doc, &p); err != nil {
					t.Fatalf("%s doc %d: %v", file, i, err)
				}
				if _, err := crawl.CrawlV1alpha1().CrawlPolicies(ns).Create(ctx, &p, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
					t.Errorf("%s: creating CrawlPolicy %s: %v", file, p.Name, err)
				}
			default:
				t.Errorf("%s doc %d: unexpected kind %q in examples", file, i, meta.Kind)
			}
		}
	}
	if proxies < 4 {
		t.Errorf("examples hold %d Proxies; want one per mode and provider (4)", proxies)
	}
}

// fullProxies together set every field of the spec (one Proxy cannot: the
// per-provider blocks exclude each other).
func fullProxies() []*crawlv1alpha1.Proxy {
	hc := crawlv1alpha1.HealthCheck{
		URL: "https://127.0.0.1:8443/generate_204", ExpectedStatus: 200,
		Interval: &metav1.Duration{Duration: 7 * time.Second}, Timeout: &metav1.Duration{Duration: 1500 * time.Millisecond},
		SuccessThreshold: 2, FailureThreshold: 4,
		TLS: &crawlv1alpha1.HealthCheckTLS{InsecureSkipVerify: true, ServerName: "target.test"},
	}
	auth := &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: "creds"}}
	proxy := func(name string, spec crawlv1alpha1.ProxySpec) *crawlv1alpha1.Proxy {
		return &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "a"}}, Spec: spec}
	}
	return []*crawlv1alpha1.Proxy{
		proxy("pod", crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderKubernetes,
			Kubernetes: &crawlv1alpha1.KubernetesProvider{
				Image: "registry.test/forward-proxy:v1", Port: 8080,
				Resources: &corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
				NodeSelector: map[string]string{"pool": "proxies"},
				Tolerations:  []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "proxies", Effect: corev1.TaintEffectNoSchedule}},
				AllowFrom:    &crawlv1alpha1.KubernetesAllowFrom{Namespaces: []string{"crawlers", "batch"}},
			},
			CloudInit: &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: "user-data", Key: "cloud-config"}},
			Auth:      auth,
			Egress: &crawlv1alpha1.ProxyEgress{
				AllowCIDRs: []crawlv1alpha1.CIDR{"10.20.0.0/16", "fd00:1::/64"},
				DenyCIDRs:  []crawlv1alpha1.CIDR{"10.20.3.0/24"},
			},
			HealthCheck: hc,
			MaxLeases:   3,
		}),
		proxy("vm", crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderGCE,
			GCE: &crawlv1alpha1.GCEProvider{
				Project: "crawl-prod", Zone: "europe-west1-b", MachineType: "e2-small",
				SourceImage: "projects/debian-cloud/global/images/family/debian-12",
				Network:     "default", Subnetwork: "proxies", NetworkTags: []string{"proxy-3128"}, Spot: true, IPv6ExitRange: true, Port: 3129,
			},
			CloudInit:   &crawlv1alpha1.CloudInit{Inline: ptr.To("#cloud-config\n")},
			HealthCheck: hc,
			MaxLeases:   1,
		}),
		proxy("ec2", crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderAWS,
			AWS: &crawlv1alpha1.AWSProvider{
				Region: "eu-west-1", InstanceTypes: []string{"t3.micro", "t3a.micro"},
				SubnetIDs: []string{"subnet-0a0a0a0a0a0a0a0a0"}, SecurityGroupIDs: []string{"sg-0123456789abcdef0"},
				Image: &crawlv1alpha1.AWSImage{ID: "ami-0123456789abcdef0"}, Spot: &crawlv1alpha1.AWSSpot{MaxPrice: "0.0040"}, Port: 3129,
			},
			CloudInit:   &crawlv1alpha1.CloudInit{Inline: ptr.To("#cloud-config\n")},
			HealthCheck: hc,
			MaxLeases:   1,
		}),
		proxy("ec2-ssm", crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderAWS,
			AWS: &crawlv1alpha1.AWSProvider{
				InstanceTypes: []string{"t3.micro"}, Image: &crawlv1alpha1.AWSImage{SSMParameter: "/aws/service/debian/release/12/latest/amd64"}, Port: 3128,
				AllowFrom: []crawlv1alpha1.CIDR{"10.20.0.0/16"}, IPv6ExitRange: true,
			},
			HealthCheck: hc,
			MaxLeases:   1,
		}),
		proxy("hcloud", crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderHetzner,
			Hetzner: &crawlv1alpha1.HetznerProvider{
				Location: "fsn1", ServerTypes: []string{"cx22", "cpx11"}, Image: "ubuntu-24.04",
				FirewallIDs: []int64{38}, PublicIPv6: true, IPv6ExitRange: true, Port: 3129,
			},
			CloudInit:   &crawlv1alpha1.CloudInit{Inline: ptr.To("#cloud-config\n")},
			HealthCheck: hc,
			MaxLeases:   1,
		}),

		proxy("hcloud-owned-firewall", crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderHetzner,
			Hetzner: &crawlv1alpha1.HetznerProvider{
				Location: "fsn1", ServerTypes: []string{"cx22", "cpx11"}, Image: "ubuntu-24.04",
				AllowFrom: []crawlv1alpha1.CIDR{"10.20.0.0/16", "2001:db8::/32"}, Port: 3129,
			},
			CloudInit:   &crawlv1alpha1.CloudInit{Inline: ptr.To("#cloud-config\n")},
			HealthCheck: hc,
			MaxLeases:   1,
		}),
		proxy("droplet", crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderDigitalOcean,
			DigitalOcean: &crawlv1alpha1.DigitalOceanProvider{
				Region: "ams3", Sizes: []string{"s-1vcpu-512mb-10gb", "s-1vcpu-1gb"}, Image: "ubuntu-24-04-x64",
				Tags: []string{"crawlers", "team:search"}, VPCUUID: "5a4981aa-9653-4bd1-bef5-d6bff52042e4", AllowFrom: []crawlv1alpha1.CIDR{"10.20.0.0/16", "2001:db8::/32"}, IPv6: true, Port: 3129,
			},
			CloudInit:   &crawlv1alpha1.CloudInit{Inline: ptr.To("#cloud-config\n")},
			HealthCheck: hc,
			MaxLeases:   1,
		}),
		proxy("azure-vm", crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderAzure,
			Azure: &crawlv1alpha1.AzureProvider{
				Location: "westeurope", VMSizes: []string{"Standard_B1s", "Standard_B1ms"},
				Image:     &crawlv1alpha1.AzureImage{Publisher: "Canonical", Offer: "ubuntu-24_04-lts", SKU: "server", Version: "24.04.202411030"},
				SubnetID:  "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/crawl/subnets/proxies",
				AllowFrom: []crawlv1alpha1.CIDR{"203.0.113.0/24", "2001:db8::/48"}, Port: 3129,
			},
			CloudInit:   &crawlv1alpha1.CloudInit{Inline: ptr.To("#cloud-config\n")},
			HealthCheck: hc,
			MaxLeases:   1,
		}),
		proxy("process", crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderLocal,
			Local: &crawlv1alpha1.LocalProvider{ExitRanges: []crawlv1alpha1.CIDR{"fd00:5e55:1::/64", "198.18.5.0/29"}}, HealthCheck: hc, MaxLeases: 1,
		}),
		proxy("shared-session", crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderSession,
			Session: &crawlv1alpha1.SessionProvider{
				Instance:             "process",
				Endpoint:             crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: 41000, Scheme: crawlv1alpha1.SchemeHTTP},
				CredentialsSecretRef: crawlv1alpha1.LocalSecretRef{Name: "proxy-auth-0123"},
			},
			HealthCheck: func() crawlv1alpha1.HealthCheck { h := hc; h.ExitIPFromBody = true; return h }(),
			MaxLeases:   1,
		}),
		proxy("session", crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderUpstream,
			Upstream: &crawlv1alpha1.UpstreamProvider{
				Endpoint:             crawlv1alpha1.Endpoint{Host: "super.example.test", Port: 22225, Scheme: crawlv1alpha1.SchemeHTTP},
				CredentialsSecretRef: crawlv1alpha1.LocalSecretRef{Name: "vendor"},
				UsernameTemplate:     "customer-acme-country-{country}-session-{session}-t-{lifetimeMinutes}",
				Countries:            []string{"us", "de"},
				SessionLifetime:      &metav1.Duration{Duration: 30 * time.Minute},
			},
			HealthCheck: func() crawlv1alpha1.HealthCheck { h := hc; h.ExitIPFromBody = true; return h }(),
			MaxLeases:   1,
		}),
		proxy("outside", crawlv1alpha1.ProxySpec{
			Mode:       crawlv1alpha1.ModeExternal,
			Endpoint:   &crawlv1alpha1.Endpoint{Host: "proxy.example.test", Port: 3128, Scheme: crawlv1alpha1.SchemeHTTPS},
			ExitRanges: []crawlv1alpha1.CIDR{"2001:db8:7::/48"},
			Auth:       auth,
			HealthCheck: func() crawlv1alpha1.HealthCheck {
				h := hc
				h.ExitInfo = &crawlv1alpha1.ExitInfo{IPField: "ip", CountryField: "location.country_code"}
				return h
			}(),
			MaxLeases: 5,
		}),
	}
}

func fullStatus(now metav1.Time) crawlv1alpha1.ProxyStatus {
	return crawlv1alpha1.ProxyStatus{
		Phase: crawlv1alpha1.PhaseReady, ProviderID: "px-0123456789abcdef", IP: "127.0.0.9", Port: 3128,
		Conditions: []metav1.Condition{
			{Type: crawlv1alpha1.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: "Created", Message: "instance running", LastTransitionTime: now, ObservedGeneration: 1},
			{Type: crawlv1alpha1.ConditionHealthy, Status: metav1.ConditionTrue, Reason: "ProbeSucceeded", Message: "204 in 12ms", LastTransitionTime: now, ObservedGeneration: 1},
		},
		ObservedGeneration: 1, LatencyMillis: 12, LastHealthCheckTime: &now, ExitIP: "203.0.113.7",
		ExitCountry: "DE", ExitRanges: []string{"fd00:5e55:1::/64"},
	}
}

// TestRoundTrip writes every spec and status field through the generated
// clientset and reads it back unchanged: the schema prunes nothing.
func TestRoundTrip(t *testing.T) {
	env := apiServer.Get(t)
	ctx := context.Background()
	ns := newNamespace(t)
	proxies := versioned.NewForConfigOrDie(env.Config).CrawlV1alpha1().Proxies(ns)
	now := metav1.NewTime(time.Now().Truncate(time.Second))

	var sent []any
	for _, p := range fullProxies() {
		p.Namespace = ns
		sent = append(sent, p.Spec)
		created, err := proxies.Create(ctx, p, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
		if err != nil {
			t.Fatalf("create %s: %v", p.Name, err)
		}
		created.Status = fullStatus(now)
		if _, err := proxies.UpdateStatus(ctx, created, metav1.UpdateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
			t.Fatalf("update status %s: %v", p.Name, err)
		}
		got, err := proxies.Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(p.Spec, got.Spec, specOptions); diff != "" {
			t.Errorf("%s spec changed on the way (-sent +read):\n%s", p.Name, diff)
		}
		if diff := cmp.Diff(fullStatus(now), got.Status, specOptions); diff != "" {
			t.Errorf("%s status changed on the way (-sent +read):\n%s", p.Name, diff)
		}
		if diff := cmp.Diff(p.Labels, got.Labels); diff != "" {
			t.Errorf("%s labels (-sent +read):\n%s", p.Name, diff)
		}
	}
	// The fixture must keep covering the API as fields are added.
	if unset := unsetFields(reflect.TypeOf(crawlv1alpha1.ProxySpec{}), sent); len(unset) > 0 {
		t.Errorf("no fixture sets spec fields %v: extend fullProxies", unset)
	}
	if unset := unsetFields(reflect.TypeOf(crawlv1alpha1.ProxyStatus{}), []any{fullStatus(now)}); len(unset) > 0 {
		t.Errorf("fullStatus leaves %v unset", unset)
	}

	// A pool of sessions on shared instances (spec.membersPerInstance).
	var instance crawlv1alpha1.ProxySpec // the local process with exit ranges
	for _, p := range fullProxies() {
		if p.Name == "process" {
			instance = p.Spec
		}
	}
	pools := versioned.NewForConfigOrDie(env.Config).CrawlV1alpha1().ProxyPools(ns)
	pool := &crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: ns},
		Spec: crawlv1alpha1.ProxyPoolSpec{
			Replicas:           ptr.To[int32](64),
			MembersPerInstance: ptr.To[int32](64),
			Template:           crawlv1alpha1.ProxyTemplate{Spec: instance},
		},
	}
	created, err := pools.Create(ctx, pool, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	if err != nil {
		t.Fatalf("create pool: %v", err)
	}
	if got := created.Spec.MembersPerInstance; got == nil || *got != 64 {
		t.Errorf("spec.membersPerInstance read back as %v, want 64", got)
	}
	if created.Spec.Template.Spec.Local == nil || len(created.Spec.Template.Spec.Local.ExitRanges) != 2 {
		t.Errorf("spec.template.spec.local.exitRanges read back as %+v", created.Spec.Template.Spec.Local)
	}
}

// unsetFields lists the paths of the fields of our own types, under typ, that
// are zero in every value given.
func unsetFields(typ reflect.Type, values []any) []string {
	set := map[string]bool{}
	for _, v := range values {
		markSet("", reflect.ValueOf(v), set)
	}
	var unset []string
	for _, path := range fieldPaths("", typ) {
		if !set[path] {
			unset = append(unset, path)
		}
	}
	return unset
}

func ownType(t reflect.Type) bool {
	return t.PkgPath() == reflect.TypeOf(crawlv1alpha1.Proxy{}).PkgPath()
}

func markSet(prefix string, v reflect.Value, set map[string]bool) {
	v = reflect.Indirect(v)
	if !v.IsValid() || v.Kind() != reflect.Struct || !ownType(v.Type()) {
		return
	}
	for i := range v.NumField() {
		path := prefix + v.Type().Field(i).Name
		if !v.Field(i).IsZero() {
			set[path] = true
		}
		markSet(path+".", v.Field(i), set)
	}
}

func fieldPaths(prefix string, t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || !ownType(t) {
		return nil
	}
	var paths []string
	for i := range t.NumField() {
		path := prefix + t.Field(i).Name
		paths = append(paths, path)
		paths = append(paths, fieldPaths(path+".", t.Field(i).Type)...)
	}
	return paths
}

// TestKubectl checks the user's view: printer columns and kubectl explain.
func TestKubectl(t *testing.T) {
	env := apiServer.Get(t)
	ctx := context.Background()
	ns := newNamespace(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	proxies := versioned.NewForConfigOrDie(env.Config).CrawlV1alpha1().Proxies(ns)
	all := fullProxies()
	p := all[slices.IndexFunc(all, func(p *crawlv1alpha1.Proxy) bool { return p.Spec.Mode == crawlv1alpha1.ModeExternal })]
	created, err := proxies.Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = fullStatus(metav1.Now())
	created.Status.LatencyMillis = 42
	if _, err := proxies.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	kubectl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(env.KubectlPath(), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, stderr.String())
		}
		return string(out)
	}

	table := kubectl("get", "px", "-n", ns)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2 {
		t.Fatalf("kubectl get px printed %d lines, want header + 1:\n%s", len(lines), table)
	}
	if got, want := strings.Fields(lines[0]), []string{"NAME", "MODE", "PROVIDER", "PHASE", "IP", "EXIT-IP", "LATENCY", "AGE"}; !cmp.Equal(got, want) {
		t.Errorf("columns = %v, want %v", got, want)
	}
	row := regexp.MustCompile(`^outside\s+External\s+Ready\s+127\.0\.0\.9\s+203\.0\.113\.7\s+42\s+\S+$`)
	if !row.MatchString(lines[1]) {
		t.Errorf("row %q does not match %s", lines[1], row)
	}
	if table := kubectl("get", "crawl", "-n", ns); !strings.Contains(table, "outside") {
		t.Errorf("the crawl category does not list the proxy:\n%s", table)
	}

	explain := kubectl("explain", "proxy.spec.healthCheck")
	for _, want := range []string{
		"HealthCheck says how the proxy is probed",
		"failureThreshold",
		"is how many consecutive failed probes make a healthy",
		"interval",
		"successThreshold",
		"timeout",
		"tls",
		"url",
	} {
		if !strings.Contains(explain, want) {
			t.Errorf("kubectl explain proxy.spec.healthCheck lacks %q:\n%s", want, explain)
		}
	}
}

// splitYAML returns the non-empty documents of a multi-document YAML file.
func splitYAML(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) != "" {
			docs = append(docs, []byte(doc))
		}
	}
	return docs
}
