package chaos_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/ec2test"
)

// TestOperatorKilledBetweenLaunchAndStatusWrite: the operator binary runs
// the aws provider against ec2test (the SDK's own endpoint and credential
// variables point it there). EC2 makes the instance of a create, and then
// of a replace, but holds the answer; the operator is killed with SIGKILL
// while it waits, so the status never records the launch. The next
// operator launches again with the same client token and gets the same
// instance: exactly one instance per launch, recorded in the status.
func TestOperatorKilledBetweenLaunchAndStatusWrite(t *testing.T) {
	ns := newNamespace(t)
	fake := ec2test.New(t, ec2test.WithInvisibleCalls(2))
	_, crawl := clients(t)
	proxies := crawl.CrawlV1alpha1().Proxies(ns)
	start := func(name string) *operatortest.Process {
		kubeconfig := t.TempDir() + "/kubeconfig"
		if err := shared.Get(t).Env.WriteKubeconfig(kubeconfig); err != nil {
			t.Fatal(err)
		}
		args := append(operatortest.NamespaceArgs(kubeconfig, ns), "--lease-auth=none",
			"--providers=aws", "--aws-region=eu-west-1", "--aws-cluster-id=chaos")
		return operatortest.Start(t, operatortest.ProcessOptions{
			Binary: shared.Get(t).Binary, Name: name, Args: append(args, shortLeaderElection...), LogsEnv: "CHAOS_LOGS",
			Env: fake.SDKEnv(),
		})
	}

	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: "launched"},
		Spec: crawlv1alpha1.ProxySpec{
			Provider: crawlv1alpha1.ProviderAWS,
			AWS:      &crawlv1alpha1.AWSProvider{SubnetIDs: []string{"subnet-0a0a0a0a0a0a0a0a0"}, SecurityGroupIDs: ec2test.DefaultSecurityGroups},
		},
	}
	release := fake.HoldAnswers(ec2test.RunInstances)
	op := start("operator-0")
	if _, err := proxies.Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for round, edit := range []func(*crawlv1alpha1.Proxy){nil, func(p *crawlv1alpha1.Proxy) { p.Spec.AWS.InstanceTypes = []string{"t3a.micro"} }} {
		if edit != nil {
			release = fake.HoldAnswers(ec2test.RunInstances)
			updateProxy(t, ns, "launched", edit)
		}
		want := round + 1 // instances ever launched
		eventually.Check(t, time.Minute, pollInterval, "EC2 made the instance", func(context.Context) error {
			if n := len(fake.Instances()); n != want {
				return fmt.Errorf("%d instances launched, want %d", n, want)
			}
			return nil
		})
		op.Kill()
		if got := getProxy(t, ns, "launched"); strings.HasSuffix(got.Status.ProviderID, fake.Instances()[round].ID) {
			t.Fatalf("round %d: the status already names the held launch (%s): the kill tested nothing", round, got.Status.ProviderID)
		}
		release()
		op = start(fmt.Sprintf("operator-%d", round+1))

		newest := fake.Instances()[round]
		eventually.Check(t, time.Minute, pollInterval, "the held instance recorded", func(ctx context.Context) error {
			got := getProxyCtx(ctx, t, ns, "launched")
			if got == nil || !strings.HasSuffix(got.Status.ProviderID, newest.ID) ||
				!meta.IsStatusConditionTrue(got.Status.Conditions, crawlv1alpha1.ConditionProvisioned) {
				return fmt.Errorf("status %+v", got.Status)
			}
			return nil
		})
		live := slices.DeleteFunc(fake.Live(), func(in ec2test.Instance) bool { return in.State == "shutting-down" })
		if all := fake.Instances(); len(all) != want || len(live) != 1 || live[0].ID != newest.ID {
			t.Errorf("round %d: %d instances launched, live %+v; want %d launched and only %s live", round, len(all), live, want, newest.ID)
		}
	}
	if n := fake.Calls(ec2test.RunInstances); n < 4 {
		t.Errorf("%d launches, want at least 4 (each held one retried by the next operator)", n)
	}
}
