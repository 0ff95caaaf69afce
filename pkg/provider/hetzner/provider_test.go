package hetzner_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/hetzner"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/hcloudtest"
)

const clusterID = "test-cluster"

// newProvider is a provider of cluster against fake, with a bucket that
// never holds a test back.
func newProvider(t *testing.T, fake *hcloudtest.Fake, cluster string) *hetzner.Provider {
	t.Helper()
	p, err := hetzner.New(hetzner.Options{
		Token: hcloudtest.Token, ClusterID: cluster, Location: "fsn1", Endpoint: fake.URL,
		RequestsPerSecond: 1000, Burst: 1000, RateLimitBackoff: 10 * time.Millisecond, Secrets: testSecrets,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testSecrets serves every credentials Secret a test Proxy names.
func testSecrets(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}},
		Data:       map[string][]byte{"username": []byte("crawler"), "password": []byte("s3cret")},
	}, nil
}

func createRequest(uid string, spec *crawlv1alpha1.HetznerProvider) provider.CreateRequest {
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "crawl", UID: types.UID(uid)},
		Spec:       crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderHetzner, Hetzner: spec},
	}
	return provider.CreateRequest{Name: provider.InstanceName(p.UID), Proxy: p, Tags: provider.Tags(p), SpecHash: "h1"}
}

func TestCreateAdoptsTheServerOfALostAnswer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := hcloudtest.New(t)
	p := newProvider(t, fake, clusterID)
	req := createRequest("00000001-0000-0000-0000-000000000000", &crawlv1alpha1.HetznerProvider{PublicIPv6: true, FirewallIDs: []int64{7}})

	fake.LoseNextAnswers(hcloudtest.CreateServer, 1)
	if _, err := p.Create(ctx, req); provider.Class(err) != provider.ErrTransient {
		t.Fatalf("create with its answer lost: %v, want a transient error", err)
	}
	inst, err := p.Create(ctx, req)
	if err != nil {
		t.Fatalf("the retried create: %v", err)
	}
	created := fake.Created()
	if len(created) != 1 || inst.ID != "1001" || inst.State != provider.StateRunning || inst.SpecHash != "h1" {
		t.Fatalf("instance %+v, %d servers created: want the one server adopted", inst, len(created))
	}
	s := created[0]
	if !s.IPv6 || len(s.Firewalls) != 1 || s.Firewalls[0] != 7 || s.Labels["crawl.proxyfleet.io/cluster-id"] != clusterID || s.Location != "fsn1" {
		t.Errorf("server %+v: want IPv6, firewall 7, the cluster label, fsn1", s)
	}
	if inst.Tags[crawlv1alpha1.TagProxyUID] != string(req.Proxy.UID) {
		t.Errorf("instance tags %v: want the Proxy's", inst.Tags)
	}
}

func TestCreateWalksServerTypesOnCapacity(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := hcloudtest.New(t)
	p := newProvider(t, fake, clusterID)
	fake.SetNoCapacity("cx22", true)
	if _, err := p.Create(ctx, createRequest("00000002-0000-0000-0000-000000000000", &crawlv1alpha1.HetznerProvider{ServerTypes: []string{"cx22", "cpx11"}})); err != nil {
		t.Fatal(err)
	}
	if created := fake.Created(); len(created) != 1 || created[0].ServerType != "cpx11" {
		t.Errorf("created %+v, want one cpx11", created)
	}

	fake.SetNoCapacity("cpx11", true)
	_, err := p.Create(ctx, createRequest("00000003-0000-0000-0000-000000000000", &crawlv1alpha1.HetznerProvider{ServerTypes: []string{"cx22", "cpx11"}}))
	if !errors.Is(err, provider.ErrQuotaExceeded) || !strings.Contains(err.Error(), "cx22") || !strings.Contains(err.Error(), "cpx11") {
		t.Errorf("no capacity anywhere: %v, want a quota error naming both server types", err)
	}
}

func TestErrorsNameTheFieldAndClass(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := hcloudtest.New(t)
	p := newProvider(t, fake, clusterID)
	noLocation, err := hetzner.New(hetzner.Options{Token: hcloudtest.Token, ClusterID: clusterID, Endpoint: fake.URL, Secrets: testSecrets})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		prov      *hetzner.Provider
		spec      *crawlv1alpha1.HetznerProvider
		fault     *hcloudtest.Error
		wantClass error
		wantText  string
	}{
		"no location":      {prov: noLocation, wantClass: provider.ErrPermanent, wantText: "spec.hetzner.location"},
		"unknown image":    {prov: p, spec: &crawlv1alpha1.HetznerProvider{Image: "plan9"}, wantClass: provider.ErrPermanent, wantText: "spec.hetzner.image"},
		"unknown type":     {prov: p, spec: &crawlv1alpha1.HetznerProvider{ServerTypes: []string{"cx99"}}, wantClass: provider.ErrPermanent, wantText: "spec.hetzner.serverTypes"},
		"project quota":    {prov: p, fault: &hcloudtest.ErrQuota, wantClass: provider.ErrQuotaExceeded, wantText: "resource_limit_exceeded"},
		"a token mistaken": {prov: p, fault: &hcloudtest.Error{Status: 403, Code: "forbidden", Message: "insufficient permissions"}, wantClass: provider.ErrPermanent, wantText: "Read & Write"},
		"server error":     {prov: p, fault: &hcloudtest.ErrServerError, wantClass: provider.ErrTransient, wantText: "server_error"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.fault != nil {
				fake.FailNext(hcloudtest.CreateServer, *tc.fault)
			}
			_, err := tc.prov.Create(ctx, createRequest("00000004-0000-0000-0000-000000000000", tc.spec))
			if provider.Class(err) != tc.wantClass || !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("error %v (class %v), want class %v naming %q", err, provider.Class(err), tc.wantClass, tc.wantText)
			}
		})
	}
	if n := len(fake.Created()); n != 0 {
		t.Errorf("%d servers created by failing creates", n)
	}
}

// A 429 holds back every call of the provider until its Retry-After ran
// out, not only the one it answered: the fake counts calls that came early.
func TestRateLimitHoldsEveryCallUntilRetryAfter(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := hcloudtest.New(t)
	p := newProvider(t, fake, clusterID)
	first, err := p.Create(ctx, createRequest("00000005-0000-0000-0000-000000000000", nil))
	if err != nil {
		t.Fatal(err)
	}

	fake.RateLimitNext(hcloudtest.CreateServer, time.Second)
	start := time.Now()
	created := make(chan error, 1)
	go func() {
		_, err := p.Create(ctx, createRequest("00000006-0000-0000-0000-000000000000", nil))
		created <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); !p.HeldUntil().After(time.Now()); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the provider never got the 429")
		}
	}
	// The provider has the 429: a Get now must wait for the Retry-After too.
	if _, err := p.Get(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if early := fake.EarlyCalls(); early != 0 {
		t.Errorf("%d calls before the Retry-After ran out, want 0", early)
	}
	if n := fake.Calls(hcloudtest.CreateServer); n != 3 {
		t.Errorf("%d creates, want 3 (one, the 429, its retry)", n)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Errorf("the retried create returned %v after the 429, before its Retry-After of 1s", waited)
	}
}

// Two clusters share a project: neither sees, lists, adopts nor deletes
// the other's servers.
func TestAnotherClustersServersDoNotExist(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := hcloudtest.New(t)
	ours, theirs := newProvider(t, fake, clusterID), newProvider(t, fake, "other-cluster")
	inst, err := theirs.Create(ctx, createRequest("00000007-0000-0000-0000-000000000000", nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ours.Get(ctx, inst.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get of another cluster's server: %v, want ErrNotFound", err)
	}
	if err := ours.Delete(ctx, inst.ID); err != nil {
		t.Errorf("Delete of another cluster's server: %v", err)
	}
	listed, err := ours.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue)
	if err != nil || len(listed) != 0 {
		t.Errorf("ListByTag: %v, %v; want nothing", listed, err)
	}
	if n := len(fake.Servers()); n != 1 {
		t.Errorf("%d servers, want the other cluster's one untouched", n)
	}
	theirsListed, err := theirs.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue)
	if err != nil || len(theirsListed) != 1 || theirsListed[0].ID != inst.ID || theirsListed[0].CreatedAt.IsZero() {
		t.Errorf("the owner's ListByTag: %+v, %v; want its server with its creation time", theirsListed, err)
	}
	if err := theirs.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := theirs.Get(ctx, inst.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
}

func TestListByTagPagesPastFifty(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := hcloudtest.New(t)
	p := newProvider(t, fake, clusterID)
	for i := range 55 {
		uid := fmt.Sprintf("%08d-0000-0000-0001-000000000000", 100+i)
		if _, err := p.Create(ctx, createRequest(uid, nil)); err != nil {
			t.Fatal(err)
		}
	}
	listed, err := p.ListByTag(context.Background(), crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue)
	if err != nil || len(listed) != 55 {
		t.Errorf("listed %d servers (%v), want 55", len(listed), err)
	}
}
