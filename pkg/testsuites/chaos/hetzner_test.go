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
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/hcloudtest"
)

// TestOperatorKilledBetweenServerCreateAndStatusWrite: the operator
// binary runs the hetzner provider against hcloudtest ($HCLOUD_ENDPOINT).
// Hetzner makes the server of a create, and then of a replace, but holds
// the answer; the operator is killed with SIGKILL while it waits, so the
// status never records the server. Server names are unique per project:
// the next operator's create of the same name finds the server and adopts
// it, exactly one server per create, recorded in the status.
func TestOperatorKilledBetweenServerCreateAndStatusWrite(t *testing.T) {
	ns := newNamespace(t)
	fake := hcloudtest.New(t)
	kube, crawl := clients(t)
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hcloud-token"}, StringData: map[string]string{"token": hcloudtest.Token}}
	if _, err := kube.CoreV1().Secrets(ns).Create(t.Context(), token, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	proxies := crawl.CrawlV1alpha1().Proxies(ns)
	start := func(name string) *operatortest.Process {
		kubeconfig := t.TempDir() + "/kubeconfig"
		if err := shared.Get(t).Env.WriteKubeconfig(kubeconfig); err != nil {
			t.Fatal(err)
		}
		args := append(operatortest.NamespaceArgs(kubeconfig, ns), "--lease-auth=none", "--providers=hetzner",
			"--hetzner-location=fsn1", "--hetzner-cluster-id=chaos", "--hetzner-token-secret="+ns+"/hcloud-token")
		return operatortest.Start(t, operatortest.ProcessOptions{
			Binary: shared.Get(t).Binary, Name: name, Args: append(args, shortLeaderElection...), LogsEnv: "CHAOS_LOGS",
			Env: fake.Env(),
		})
	}

	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: "created"},
		Spec: crawlv1alpha1.ProxySpec{
			Provider: crawlv1alpha1.ProviderHetzner,
			Hetzner:  &crawlv1alpha1.HetznerProvider{ServerTypes: []string{"cx22"}},
		},
	}
	release := fake.HoldAnswers(hcloudtest.CreateServer)
	op := start("operator-0")
	if _, err := proxies.Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for round, edit := range []func(*crawlv1alpha1.Proxy){nil, func(p *crawlv1alpha1.Proxy) { p.Spec.Hetzner.ServerTypes = []string{"cx32"} }} {
		if edit != nil {
			release = fake.HoldAnswers(hcloudtest.CreateServer)
			updateProxy(t, ns, "created", edit)
		}
		want := round + 1 // servers ever created
		eventually.Check(t, time.Minute, pollInterval, "Hetzner made the server", func(context.Context) error {
			if n := len(fake.Created()); n != want {
				return fmt.Errorf("%d servers created, want %d", n, want)
			}
			return nil
		})
		newest := fake.Created()[round]
		op.Kill()
		if got := getProxy(t, ns, "created"); strings.HasSuffix(got.Status.ProviderID, fmt.Sprint(newest.ID)) {
			t.Fatalf("round %d: the status already names the held create (%s): the kill tested nothing", round, got.Status.ProviderID)
		}
		release()
		op = start(fmt.Sprintf("operator-%d", round+1))

		eventually.Check(t, time.Minute, pollInterval, "the held server recorded", func(ctx context.Context) error {
			got := getProxyCtx(ctx, t, ns, "created")
			if got == nil || !strings.HasSuffix(got.Status.ProviderID, fmt.Sprint(newest.ID)) ||
				!meta.IsStatusConditionTrue(got.Status.Conditions, crawlv1alpha1.ConditionProvisioned) {
				return fmt.Errorf("status %+v", got.Status)
			}
			return nil
		})
		eventually.Check(t, time.Minute, pollInterval, "only the held server live", func(context.Context) error {
			if all, live := fake.Created(), fake.Servers(); len(all) != want || len(live) != 1 || live[0].ID != newest.ID {
				return fmt.Errorf("round %d: %d servers created, live %v; want %d created and only %d live", round, len(all), live, want, newest.ID)
			}
			return nil
		})
	}
}
