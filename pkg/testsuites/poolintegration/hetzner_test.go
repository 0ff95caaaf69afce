package poolintegration_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/hcloudtest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// TestHetznerPoolScalesAndRotates: a pool of hetzner members, the operator
// binary driving hcloud-go against hcloudtest ($HCLOUD_ENDPOINT), where
// every server boots a real forward proxy on its public (loopback) IP with
// the port and credentials of its user-data, so a member is Ready only if
// the operator's probe goes through the proxy its own create configured.
// The pool scales up, rotates onto another server type within its surge
// and unavailability bounds, scales down, and is deleted, leaving no server.
func TestHetznerPoolScalesAndRotates(t *testing.T) {
	t.Parallel()
	fake := hcloudtest.New(t, hcloudtest.WithSteps(1), hcloudtest.WithListLag(1),
		hcloudtest.WithPublicIP(func(n int) string { return fmt.Sprintf("127.0.104.%d", n) }),
		hcloudtest.WithBoot(faultkit.BootForwardProxy(t, nil, proxytest.Loopback)))
	kube, crawl := kubernetes.NewForConfigOrDie(shared.Get(t).Env.Config), versioned.NewForConfigOrDie(shared.Get(t).Env.Config)
	pt := &poolTest{t: t, kube: kube, crawl: crawl, stateDir: t.TempDir(), env: fake.Env()}
	pt.ns = operatortest.NewNamespace(t, kube)
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hcloud-token"}, StringData: map[string]string{"token": hcloudtest.Token}}
	if _, err := kube.CoreV1().Secrets(pt.ns).Create(t.Context(), token, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pt.flags = []string{"--providers=hetzner", "--hetzner-location=fsn1", "--hetzner-cluster-id=pools", "--hetzner-token-secret=" + pt.ns + "/hcloud-token"}
	pt.start()

	target := proxytest.StartHTTPTarget(t)
	pt.create(newPool("hcloud", 2, target.URL, func(p *crawlv1alpha1.ProxyPool) {
		p.Spec.Template.Spec.Provider = crawlv1alpha1.ProviderHetzner
		p.Spec.Template.Spec.Hetzner = &crawlv1alpha1.HetznerProvider{ServerTypes: []string{"cx22"}}
	}))
	eventually.Check(t, 2*time.Minute, interval, "2 Ready members", func(ctx context.Context) error { return pt.hetznerSettled(ctx, fake, 2, "cx22") })

	pt.updatePool("hcloud", func(p *crawlv1alpha1.ProxyPool) { p.Spec.Replicas = ptr.To[int32](3) })
	eventually.Check(t, 2*time.Minute, interval, "3 Ready members", func(ctx context.Context) error { return pt.hetznerSettled(ctx, fake, 3, "cx22") })

	s := pt.sample("hcloud")
	pt.updatePool("hcloud", func(p *crawlv1alpha1.ProxyPool) { p.Spec.Template.Spec.Hetzner.ServerTypes = []string{"cpx11"} })
	eventually.Check(t, 3*time.Minute, interval, "3 Ready members on cpx11", func(ctx context.Context) error {
		return pt.hetznerSettled(ctx, fake, 3, "cpx11")
	})
	s.finish()
	t.Logf("%d samples during the rotation: min Ready %d, max members %d", s.samples, s.minReady, s.maxMembers)
	if s.minReady < 2 || s.maxMembers > 4 || s.samples < 10 {
		t.Errorf("rotation: min Ready %d (maxUnavailable 1 allows 2), max members %d (maxSurge 1 allows 4), %d samples", s.minReady, s.maxMembers, s.samples)
	}

	pt.updatePool("hcloud", func(p *crawlv1alpha1.ProxyPool) { p.Spec.Replicas = ptr.To[int32](1) })
	eventually.Check(t, 2*time.Minute, interval, "1 Ready member", func(ctx context.Context) error { return pt.hetznerSettled(ctx, fake, 1, "cpx11") })

	if err := pt.crawl.CrawlV1alpha1().ProxyPools(pt.ns).Delete(t.Context(), "hcloud", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.Check(t, time.Minute, interval, "members and servers gone", func(ctx context.Context) error {
		ms, err := pt.members(ctx, "hcloud")
		if err != nil || len(ms) > 0 {
			return fmt.Errorf("%d members left (%v)", len(ms), err)
		}
		if servers := fake.Servers(); len(servers) > 0 {
			return fmt.Errorf("servers left: %v", servers)
		}
		return nil
	})
}

// hetznerSettled: the pool settled with replicas members, and the servers
// that are not being deleted are exactly the members' (one each, of
// serverType, the one the status names): nothing leaked, nothing doubled.
func (pt *poolTest) hetznerSettled(ctx context.Context, fake *hcloudtest.Fake, replicas int, serverType string) error {
	if err := pt.settled(ctx, "hcloud", replicas); err != nil {
		return err
	}
	ms, err := pt.members(ctx, "hcloud")
	if err != nil {
		return err
	}
	up := slices.DeleteFunc(fake.Servers(), func(s hcloudtest.Server) bool { return s.Status == "deleting" })
	if len(up) != len(ms) {
		return fmt.Errorf("%d servers up for %d members: %v", len(up), len(ms), up)
	}
	for _, m := range ms {
		i := slices.IndexFunc(up, func(s hcloudtest.Server) bool {
			return s.Labels[crawlv1alpha1.TagProxyUID] == string(m.UID) && strings.HasSuffix(m.Status.ProviderID, fmt.Sprintf("://%d", s.ID))
		})
		if i < 0 || up[i].ServerType != serverType {
			return fmt.Errorf("member %s (%s): no %s server up for it in %v", m.Name, m.Status.ProviderID, serverType, up)
		}
	}
	return nil
}
