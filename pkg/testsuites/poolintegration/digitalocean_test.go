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
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/dotest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// TestDigitalOceanPoolScalesAndRotates: a pool of digitalocean members, the
// operator binary driving godo against dotest ($DIGITALOCEAN_API_URL),
// where every droplet boots a real forward proxy on its public (loopback)
// IP with the port and credentials of its user-data, so a member is Ready
// only if the operator's probe goes through the proxy its own create
// configured. The pool scales up, rotates onto another size within its
// surge and unavailability bounds, scales down, and is deleted, leaving no
// droplet.
func TestDigitalOceanPoolScalesAndRotates(t *testing.T) {
	t.Parallel()
	fake := dotest.New(t, dotest.WithSteps(1), dotest.WithListLag(1),
		dotest.WithPublicIP(func(n int) string { return fmt.Sprintf("127.0.106.%d", n) }),
		dotest.WithBoot(faultkit.BootForwardProxy(t, nil, proxytest.Loopback)))
	kube, crawl := kubernetes.NewForConfigOrDie(shared.Get(t).Env.Config), versioned.NewForConfigOrDie(shared.Get(t).Env.Config)
	pt := &poolTest{t: t, kube: kube, crawl: crawl, stateDir: t.TempDir(), env: fake.Env()}
	pt.ns = operatortest.NewNamespace(t, kube)
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "do-token"}, StringData: map[string]string{"token": dotest.Token}}
	if _, err := kube.CoreV1().Secrets(pt.ns).Create(t.Context(), token, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pt.flags = []string{"--providers=digitalocean", "--digitalocean-region=ams3", "--digitalocean-cluster-id=pools", "--digitalocean-token-secret=" + pt.ns + "/do-token"}
	pt.start()

	target := proxytest.StartHTTPTarget(t)
	pt.create(newPool("droplets", 2, target.URL, func(p *crawlv1alpha1.ProxyPool) {
		p.Spec.Template.Spec.Provider = crawlv1alpha1.ProviderDigitalOcean
		p.Spec.Template.Spec.DigitalOcean = &crawlv1alpha1.DigitalOceanProvider{Sizes: []string{small}}
	}))
	eventually.Check(t, 2*time.Minute, interval, "2 Ready members", func(ctx context.Context) error { return pt.dropletsSettled(ctx, fake, 2, small) })

	pt.updatePool("droplets", func(p *crawlv1alpha1.ProxyPool) { p.Spec.Replicas = ptr.To[int32](3) })
	eventually.Check(t, 2*time.Minute, interval, "3 Ready members", func(ctx context.Context) error { return pt.dropletsSettled(ctx, fake, 3, small) })

	s := pt.sample("droplets")
	pt.updatePool("droplets", func(p *crawlv1alpha1.ProxyPool) { p.Spec.Template.Spec.DigitalOcean.Sizes = []string{large} })
	eventually.Check(t, 3*time.Minute, interval, "3 Ready members on "+large, func(ctx context.Context) error {
		return pt.dropletsSettled(ctx, fake, 3, large)
	})
	s.finish()
	t.Logf("%d samples during the rotation: min Ready %d, max members %d", s.samples, s.minReady, s.maxMembers)
	if s.minReady < 2 || s.maxMembers > 4 || s.samples < 10 {
		t.Errorf("rotation: min Ready %d (maxUnavailable 1 allows 2), max members %d (maxSurge 1 allows 4), %d samples", s.minReady, s.maxMembers, s.samples)
	}

	pt.updatePool("droplets", func(p *crawlv1alpha1.ProxyPool) { p.Spec.Replicas = ptr.To[int32](1) })
	eventually.Check(t, 2*time.Minute, interval, "1 Ready member", func(ctx context.Context) error { return pt.dropletsSettled(ctx, fake, 1, large) })

	if err := pt.crawl.CrawlV1alpha1().ProxyPools(pt.ns).Delete(t.Context(), "droplets", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.Check(t, time.Minute, interval, "members and droplets gone", func(ctx context.Context) error {
		ms, err := pt.members(ctx, "droplets")
		if err != nil || len(ms) > 0 {
			return fmt.Errorf("%d members left (%v)", len(ms), err)
		}
		if droplets := fake.Droplets(); len(droplets) > 0 {
			return fmt.Errorf("droplets left: %v", droplets)
		}
		return nil
	})
}

// The sizes the pool rotates between.
const small, large = "s-1vcpu-512mb-10gb", "s-1vcpu-1gb"

// dropletsSettled: the pool settled with replicas members, and the
// droplets are exactly the members' (one each, of size, the one the status
// names): nothing leaked, nothing doubled.
func (pt *poolTest) dropletsSettled(ctx context.Context, fake *dotest.Fake, replicas int, size string) error {
	if err := pt.settled(ctx, "droplets", replicas); err != nil {
		return err
	}
	ms, err := pt.members(ctx, "droplets")
	if err != nil {
		return err
	}
	up := fake.Droplets()
	if len(up) != len(ms) {
		return fmt.Errorf("%d droplets up for %d members: %v", len(up), len(ms), up)
	}
	for _, m := range ms {
		i := slices.IndexFunc(up, func(d dotest.Droplet) bool {
			return d.HasTag("pxo:proxy-uid:"+string(m.UID)) && strings.HasSuffix(m.Status.ProviderID, fmt.Sprintf("://%d", d.ID))
		})
		if i < 0 || up[i].Size != size {
			return fmt.Errorf("member %s (%s): no %s droplet up for it in %v", m.Name, m.Status.ProviderID, size, up)
		}
	}
	return nil
}
