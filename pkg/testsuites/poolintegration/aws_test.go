package poolintegration_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/ec2test"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// TestAWSPoolScalesAndRotates: a pool of aws members, the operator binary
// driving the real SDK against ec2test, where every launched instance
// "boots" a real forward proxy on its public (loopback) IP with the port
// and credentials its user-data carries, so a member is Ready only if the
// operator's probe goes through the proxy its own launch configured. The
// pool scales up, rotates onto another instance type within its surge and
// unavailability bounds, scales down, and is deleted, leaving no instance.
// Its members sit in the security group the operator owns for allowFrom.
func TestAWSPoolScalesAndRotates(t *testing.T) {
	t.Parallel()
	fake := ec2test.New(t, ec2test.WithInvisibleCalls(1), ec2test.WithBoot(faultkit.BootForwardProxy(t, nil, proxytest.Loopback)))
	kube, crawl := kubernetes.NewForConfigOrDie(shared.Get(t).Env.Config), versioned.NewForConfigOrDie(shared.Get(t).Env.Config)
	pt := &poolTest{t: t, kube: kube, crawl: crawl, stateDir: t.TempDir(), env: fake.SDKEnv()}
	pt.ns = operatortest.NewNamespace(t, kube)
	pt.flags = []string{"--providers=aws", "--aws-region=eu-west-1", "--aws-cluster-id=pools"}
	pt.start()

	target := proxytest.StartHTTPTarget(t)
	pt.create(newPool("ec2", 2, target.URL, func(p *crawlv1alpha1.ProxyPool) {
		p.Spec.Template.Spec.Provider = crawlv1alpha1.ProviderAWS
		p.Spec.Template.Spec.AWS = &crawlv1alpha1.AWSProvider{
			SubnetIDs: []string{"subnet-0a0a0a0a0a0a0a0a0", "subnet-0b0b0b0b0b0b0b0b0"}, AllowFrom: []crawlv1alpha1.CIDR{"127.0.0.0/8"},
		}
	}))
	eventually.Check(t, 2*time.Minute, interval, "2 Ready members", func(ctx context.Context) error { return pt.awsSettled(ctx, fake, 2, "t3.micro") })
	// The members share the one security group the operator made for
	// their allowFrom: the proxy port from loopback, nothing else.
	if groups := fake.SecurityGroups(); len(groups) != 1 || !slices.Equal(groups[0].Ingress, []string{"tcp/3128/127.0.0.0/8"}) {
		t.Errorf("security groups %+v, want one admitting tcp/3128 from 127.0.0.0/8", groups)
	}

	pt.updatePool("ec2", func(p *crawlv1alpha1.ProxyPool) { p.Spec.Replicas = ptr.To[int32](3) })
	eventually.Check(t, 2*time.Minute, interval, "3 Ready members", func(ctx context.Context) error { return pt.awsSettled(ctx, fake, 3, "t3.micro") })

	s := pt.sample("ec2")
	pt.updatePool("ec2", func(p *crawlv1alpha1.ProxyPool) { p.Spec.Template.Spec.AWS.InstanceTypes = []string{"t3a.micro"} })
	eventually.Check(t, 3*time.Minute, interval, "3 Ready members on t3a.micro", func(ctx context.Context) error {
		return pt.awsSettled(ctx, fake, 3, "t3a.micro")
	})
	s.finish()
	t.Logf("%d samples during the rotation: min Ready %d, max members %d", s.samples, s.minReady, s.maxMembers)
	if s.minReady < 2 || s.maxMembers > 4 || s.samples < 10 {
		t.Errorf("rotation: min Ready %d (maxUnavailable 1 allows 2), max members %d (maxSurge 1 allows 4), %d samples", s.minReady, s.maxMembers, s.samples)
	}

	pt.updatePool("ec2", func(p *crawlv1alpha1.ProxyPool) { p.Spec.Replicas = ptr.To[int32](1) })
	eventually.Check(t, 2*time.Minute, interval, "1 Ready member", func(ctx context.Context) error { return pt.awsSettled(ctx, fake, 1, "t3a.micro") })

	if err := pt.crawl.CrawlV1alpha1().ProxyPools(pt.ns).Delete(t.Context(), "ec2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.Check(t, time.Minute, interval, "members and instances gone", func(ctx context.Context) error {
		ms, err := pt.members(ctx, "ec2")
		if err != nil || len(ms) > 0 {
			return fmt.Errorf("%d members left (%v)", len(ms), err)
		}
		if up := upInstances(fake); len(up) > 0 {
			return fmt.Errorf("instances still up: %v", up)
		}
		return nil
	})
}

// awsSettled: the pool settled with replicas members, and the instances up
// are exactly the members' (one each, of instanceType, the one the status
// names): nothing leaked, nothing doubled.
func (pt *poolTest) awsSettled(ctx context.Context, fake *ec2test.Server, replicas int, instanceType string) error {
	if err := pt.settled(ctx, "ec2", replicas); err != nil {
		return err
	}
	ms, err := pt.members(ctx, "ec2")
	if err != nil {
		return err
	}
	up := upInstances(fake)
	if len(up) != len(ms) {
		return fmt.Errorf("%d instances up for %d members: %v", len(up), len(ms), up)
	}
	for _, m := range ms {
		i := slices.IndexFunc(up, func(in ec2test.Instance) bool {
			return in.Tags[crawlv1alpha1.TagProxyUID] == string(m.UID) && strings.HasSuffix(m.Status.ProviderID, "/"+in.ID)
		})
		if i < 0 || up[i].InstanceType != instanceType {
			return fmt.Errorf("member %s (%s): no %s instance up for it in %v", m.Name, m.Status.ProviderID, instanceType, up)
		}
	}
	return nil
}

// upInstances are the instances pending or running.
func upInstances(fake *ec2test.Server) []ec2test.Instance {
	return slices.DeleteFunc(fake.Live(), func(in ec2test.Instance) bool { return in.State != "pending" && in.State != "running" })
}
