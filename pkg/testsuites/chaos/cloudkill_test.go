package chaos_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/azuretest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/dotest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/hcloudtest"
)

// TestOperatorKilledBetweenDropletCreateAndStatusWrite: DigitalOcean's
// droplet names are not unique; the next operator lists droplets by the
// create's key tag and adopts the held one.
func TestOperatorKilledBetweenDropletCreateAndStatusWrite(t *testing.T) {
	fake := dotest.New(t)
	ids := func(ds []dotest.Droplet) []string {
		out := make([]string, len(ds))
		for i, d := range ds {
			out[i] = fmt.Sprint(d.ID)
		}
		return out
	}
	testKilledBetweenCreateAndStatusWrite(t, killedCloud{
		token: dotest.Token, env: fake.Env(),
		flags: func(secret string) []string {
			return []string{"--providers=digitalocean", "--digitalocean-region=ams3", "--digitalocean-cluster-id=chaos", "--digitalocean-token-secret=" + secret}
		},
		spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderDigitalOcean,
			DigitalOcean: &crawlv1alpha1.DigitalOceanProvider{Sizes: []string{"s-1vcpu-512mb-10gb"}}},
		edit:       func(p *crawlv1alpha1.Proxy) { p.Spec.DigitalOcean.Sizes = []string{"s-1vcpu-1gb"} },
		holdCreate: func() func() { return fake.HoldAnswers(dotest.CreateDroplet) },
		created:    func() []string { return ids(fake.Created()) },
		live:       func() []string { return ids(fake.Droplets()) },
	})
}

// TestOperatorKilledBetweenServerCreateAndStatusWrite: Hetzner's server
// names are unique per project; the next operator's create of the same
// name meets the held server and adopts it.
func TestOperatorKilledBetweenServerCreateAndStatusWrite(t *testing.T) {
	fake := hcloudtest.New(t)
	ids := func(ss []hcloudtest.Server) []string {
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = fmt.Sprint(s.ID)
		}
		return out
	}
	testKilledBetweenCreateAndStatusWrite(t, killedCloud{
		token: hcloudtest.Token, env: fake.Env(),
		flags: func(secret string) []string {
			return []string{"--providers=hetzner", "--hetzner-location=fsn1", "--hetzner-cluster-id=chaos", "--hetzner-token-secret=" + secret}
		},
		spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderHetzner,
			Hetzner: &crawlv1alpha1.HetznerProvider{ServerTypes: []string{"cx22"}}},
		edit:       func(p *crawlv1alpha1.Proxy) { p.Spec.Hetzner.ServerTypes = []string{"cx32"} },
		holdCreate: func() func() { return fake.HoldAnswers(hcloudtest.CreateServer) },
		created:    func() []string { return ids(fake.Created()) },
		live:       func() []string { return ids(fake.Servers()) },
	})
}

// TestOperatorKilledBetweenVMCreateAndStatusWrite: Azure's names are
// unique per resource group and a PUT creates or updates; the next
// operator's create PUTs the same names and adopts the held VM.
func TestOperatorKilledBetweenVMCreateAndStatusWrite(t *testing.T) {
	fake := azuretest.New(t)
	names := func(vms []azuretest.VM) []string {
		out := make([]string, len(vms))
		for i, vm := range vms {
			out[i] = vm.Name
		}
		return out
	}
	testKilledBetweenCreateAndStatusWrite(t, killedCloud{
		secret: map[string]string{"tenantID": azuretest.TenantID, "clientID": azuretest.ClientID, "clientSecret": azuretest.ClientSecret},
		env:    fake.Env(t),
		flags: func(secret string) []string {
			return []string{"--providers=azure", "--azure-subscription-id=" + azuretest.SubscriptionID, "--azure-resource-group=" + azuretest.ResourceGroup,
				"--azure-location=westeurope", "--azure-subnet-id=" + azuretest.SubnetID, "--azure-cluster-id=chaos", "--azure-credentials-secret=" + secret}
		},
		spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderAzure,
			Azure: &crawlv1alpha1.AzureProvider{VMSizes: []string{"Standard_B1s"}}},
		edit:       func(p *crawlv1alpha1.Proxy) { p.Spec.Azure.VMSizes = []string{"Standard_B1ms"} },
		holdCreate: func() func() { return fake.HoldAnswers(azuretest.PutVM) },
		created:    func() []string { return names(fake.Created()) },
		live:       func() []string { return names(fake.VMs()) },
	})
}

// killedCloud is what testKilledBetweenCreateAndStatusWrite needs of a
// cloud: its fake (token, environment, held creates, the instances it
// made and those live, by ID), the operator's flags for it, and a Proxy
// spec with an edit that replaces the instance.
type killedCloud struct {
	token string
	// secret, when set, is the credentials Secret's data instead of
	// {"token": token}.
	secret     map[string]string
	env        []string
	flags      func(tokenSecret string) []string
	spec       crawlv1alpha1.ProxySpec
	edit       func(*crawlv1alpha1.Proxy)
	holdCreate func() (release func())
	created    func() []string
	live       func() []string
}

// testKilledBetweenCreateAndStatusWrite: the operator binary runs the
// cloud's provider against its fake. The cloud makes the instance of a
// create, and then of a replace, but holds the answer; the operator is
// killed with SIGKILL while it waits, so the status never records the
// instance. The next operator finds it by the cloud's own means: exactly
// one instance per create, recorded in the status.
func testKilledBetweenCreateAndStatusWrite(t *testing.T, c killedCloud) {
	ns := newNamespace(t)
	kube, crawl := clients(t)
	data := c.secret
	if data == nil {
		data = map[string]string{"token": c.token}
	}
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cloud-token"}, StringData: data}
	if _, err := kube.CoreV1().Secrets(ns).Create(t.Context(), token, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := func(name string) *operatortest.Process {
		kubeconfig := t.TempDir() + "/kubeconfig"
		if err := shared.Get(t).Env.WriteKubeconfig(kubeconfig); err != nil {
			t.Fatal(err)
		}
		args := append(operatortest.NamespaceArgs(kubeconfig, ns), "--lease-auth=none")
		args = append(args, c.flags(ns+"/cloud-token")...)
		return operatortest.Start(t, operatortest.ProcessOptions{
			Binary: shared.Get(t).Binary, Name: name, Args: append(args, shortLeaderElection...), LogsEnv: "CHAOS_LOGS",
			Env: c.env,
		})
	}

	release := c.holdCreate()
	op := start("operator-0")
	p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: "created"}, Spec: *c.spec.DeepCopy()}
	if _, err := crawl.CrawlV1alpha1().Proxies(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for round, edit := range []func(*crawlv1alpha1.Proxy){nil, c.edit} {
		if edit != nil {
			release = c.holdCreate()
			updateProxy(t, ns, "created", edit)
		}
		want := round + 1 // instances ever created
		eventually.Check(t, time.Minute, pollInterval, "the cloud made the instance", func(context.Context) error {
			if n := len(c.created()); n != want {
				return fmt.Errorf("%d instances created, want %d", n, want)
			}
			return nil
		})
		newest := c.created()[round]
		op.Kill()
		if got := getProxy(t, ns, "created"); strings.HasSuffix(got.Status.ProviderID, newest) {
			t.Fatalf("round %d: the status already names the held create (%s): the kill tested nothing", round, got.Status.ProviderID)
		}
		release()
		op = start(fmt.Sprintf("operator-%d", round+1))

		eventually.Check(t, time.Minute, pollInterval, "the held instance recorded", func(ctx context.Context) error {
			got := getProxyCtx(ctx, t, ns, "created")
			if got == nil || !strings.HasSuffix(got.Status.ProviderID, newest) ||
				!meta.IsStatusConditionTrue(got.Status.Conditions, crawlv1alpha1.ConditionProvisioned) {
				return fmt.Errorf("status %+v", got.Status)
			}
			return nil
		})
		eventually.Check(t, time.Minute, pollInterval, "only the held instance live", func(context.Context) error {
			if all, live := c.created(), c.live(); len(all) != want || len(live) != 1 || live[0] != newest {
				return fmt.Errorf("round %d: %d instances created, live %v; want %d created and only %s live", round, len(all), live, want, newest)
			}
			return nil
		})
	}
}
