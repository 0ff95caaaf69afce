package digitalocean_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/digitalocean"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/dotest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

const clusterID = "test-cluster"

// newProvider is a provider of cluster against fake, with a bucket that
// never holds a test back.
func newProvider(t *testing.T, fake *dotest.Fake, cluster string, settle time.Duration) *digitalocean.Provider {
	t.Helper()
	p, err := digitalocean.New(digitalocean.Options{
		Token: dotest.Token, ClusterID: cluster, Region: "ams3", Endpoint: fake.URL,
		RequestsPerSecond: 1000, Burst: 1000, RateLimitBackoff: 10 * time.Millisecond, SettleTime: settle, Secrets: testSecrets,
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

func createRequest(uid string, spec *crawlv1alpha1.DigitalOceanProvider) provider.CreateRequest {
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "crawl", UID: types.UID(uid)},
		Spec:       crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderDigitalOcean, DigitalOcean: spec},
	}
	return provider.CreateRequest{Name: provider.InstanceName(p.UID), Proxy: p, Tags: provider.Tags(p), SpecHash: "h1"}
}

// A create whose answer was lost is retried while the listing by tag
// still hides the droplet it made: the retry waits for the droplet to be
// listed and adopts it. One droplet, tagged with the cluster and the key.
func TestCreateAdoptsTheDropletOfALostAnswerDespiteListLag(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := dotest.New(t, dotest.WithListLag(2))
	p := newProvider(t, fake, clusterID, time.Minute)
	req := createRequest("00000001-0000-0000-0000-000000000000", &crawlv1alpha1.DigitalOceanProvider{IPv6: true, Tags: []string{"crawlers"}})

	fake.LoseNextAnswers(dotest.CreateDroplet, 1)
	if _, err := p.Create(ctx, req); provider.Class(err) != provider.ErrTransient {
		t.Fatalf("create with its answer lost: %v, want a transient error", err)
	}
	var inst provider.Instance
	for attempt := 1; ; attempt++ {
		var err error
		if inst, err = p.Create(ctx, req); err == nil {
			break
		}
		if provider.Class(err) != provider.ErrTransient || attempt > 5 {
			t.Fatalf("retry %d: %v", attempt, err)
		}
	}
	created := fake.Created()
	if len(created) != 1 || inst.ID != fmt.Sprint(created[0].ID) || inst.State != provider.StateRunning || inst.SpecHash != "h1" {
		t.Fatalf("instance %+v, %d droplets created: want the one droplet adopted", inst, len(created))
	}
	d := created[0]
	for _, tag := range []string{"pxo:cluster-id:" + clusterID, "pxo:proxy-uid:" + string(req.Proxy.UID), "crawlers"} {
		if !d.HasTag(tag) {
			t.Errorf("droplet tags %v lack %q", d.Tags, tag)
		}
	}
	if !d.IPv6 || d.Region != "ams3" || !slices.ContainsFunc(d.Tags, func(t string) bool { return strings.HasPrefix(t, "pxo:key:") }) {
		t.Errorf("droplet %+v: want IPv6, ams3 and a key tag", d)
	}
	if inst.Tags[crawlv1alpha1.TagProxyUID] != string(req.Proxy.UID) {
		t.Errorf("instance tags %v: want the Proxy's", inst.Tags)
	}
}

// Two droplets of one create (two operators, each restarted after a lost
// answer, whose listing hid the other's droplet): the next create that
// lists both keeps the older and deletes the other. One the listing still
// hides is left to the orphan collector's duplicate rule (pkg/gc).
func TestCreateKeepsOneOfTwoDropletsOfTheSameKey(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := dotest.New(t, dotest.WithListLag(1))
	req := createRequest("00000008-0000-0000-0000-000000000000", nil)
	for range 2 {
		fake.LoseNextAnswers(dotest.CreateDroplet, 1)
		_, _ = newProvider(t, fake, clusterID, time.Minute).Create(ctx, req)
	}
	third := newProvider(t, fake, clusterID, time.Minute)
	if listed, err := third.ListByTag(ctx, crawlv1alpha1.TagProxyUID, string(req.Proxy.UID)); err != nil || len(listed) != 1 {
		t.Fatalf("listing while the second droplet is hidden: %v, %v; want the first only", listed, err)
	}
	inst, err := third.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	created, live := fake.Created(), fake.Droplets()
	if len(created) != 2 || len(live) != 1 || live[0].ID != created[0].ID || inst.ID != fmt.Sprint(created[0].ID) {
		t.Errorf("created %v, live %v, adopted %s: want the older of two kept and adopted", created, live, inst.ID)
	}
}

func TestCreateWalksSizesOnCapacity(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := dotest.New(t)
	p := newProvider(t, fake, clusterID, time.Minute)
	sizes := []string{"s-1vcpu-512mb-10gb", "s-1vcpu-1gb"}
	fake.SetNoCapacity(sizes[0], true)
	if _, err := p.Create(ctx, createRequest("00000002-0000-0000-0000-000000000000", &crawlv1alpha1.DigitalOceanProvider{Sizes: sizes})); err != nil {
		t.Fatal(err)
	}
	if created := fake.Created(); len(created) != 1 || created[0].Size != sizes[1] {
		t.Errorf("created %+v, want one %s", created, sizes[1])
	}
	fake.SetNoCapacity(sizes[1], true)
	_, err := p.Create(ctx, createRequest("00000003-0000-0000-0000-000000000000", &crawlv1alpha1.DigitalOceanProvider{Sizes: sizes}))
	if !errors.Is(err, provider.ErrQuotaExceeded) || !strings.Contains(err.Error(), sizes[0]) || !strings.Contains(err.Error(), sizes[1]) {
		t.Errorf("no capacity anywhere: %v, want a quota error naming both sizes", err)
	}
}

func TestErrorsNameTheFieldAndClass(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := dotest.New(t)
	p := newProvider(t, fake, clusterID, time.Minute)
	noRegion, err := digitalocean.New(digitalocean.Options{Token: dotest.Token, ClusterID: clusterID, Endpoint: fake.URL, Secrets: testSecrets})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		prov      *digitalocean.Provider
		spec      *crawlv1alpha1.DigitalOceanProvider
		fault     *dotest.Error
		wantClass error
		wantText  string
	}{
		"no region":       {prov: noRegion, wantClass: provider.ErrPermanent, wantText: "spec.digitalocean.region"},
		"an operator tag": {prov: p, spec: &crawlv1alpha1.DigitalOceanProvider{Tags: []string{"pxo:mine"}}, wantClass: provider.ErrPermanent, wantText: "spec.digitalocean.tags[0]"},
		"unknown image":   {prov: p, spec: &crawlv1alpha1.DigitalOceanProvider{Image: "plan9"}, wantClass: provider.ErrPermanent, wantText: "spec.digitalocean.image"},
		"unknown size":    {prov: p, spec: &crawlv1alpha1.DigitalOceanProvider{Sizes: []string{"s-99vcpu"}}, wantClass: provider.ErrPermanent, wantText: "spec.digitalocean.sizes"},
		"droplet limit":   {prov: p, fault: &dotest.ErrQuota, wantClass: provider.ErrQuotaExceeded, wantText: "droplet limit"},
		"a scope missing": {prov: p, fault: &dotest.Error{Status: 403, ID: "forbidden", Message: "You are not authorized to perform this operation"}, wantClass: provider.ErrPermanent, wantText: "docs/digitalocean.md"},
		"server error":    {prov: p, fault: &dotest.ErrServerError, wantClass: provider.ErrTransient, wantText: "unable to give you a response"},
		"service is down": {prov: p, fault: &dotest.ErrUnavailable, wantClass: provider.ErrTransient, wantText: "temporarily unavailable"},
	}
	n := 0
	for name, tc := range tests {
		n++
		uid := fmt.Sprintf("%08d-0004-0000-0000-000000000000", n) // a create of its own: a 5xx leaves its key unsettled
		t.Run(name, func(t *testing.T) {
			if tc.fault != nil {
				fake.FailNext(dotest.CreateDroplet, *tc.fault)
			}
			_, err := tc.prov.Create(ctx, createRequest(uid, tc.spec))
			if provider.Class(err) != tc.wantClass || !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("error %v (class %v), want class %v naming %q", err, provider.Class(err), tc.wantClass, tc.wantText)
			}
		})
	}
	if n := len(fake.Created()); n != 0 {
		t.Errorf("%d droplets created by failing creates", n)
	}
}

// A 429 holds back every call of the provider until its Retry-After ran
// out, not only the one it answered: the fake counts calls that came early.
func TestRateLimitHoldsEveryCallUntilRetryAfter(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := dotest.New(t)
	p := newProvider(t, fake, clusterID, time.Minute)
	first, err := p.Create(ctx, createRequest("00000005-0000-0000-0000-000000000000", nil))
	if err != nil {
		t.Fatal(err)
	}

	fake.RateLimitNext(dotest.CreateDroplet, time.Second)
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
	if n := fake.Calls(dotest.CreateDroplet); n != 3 {
		t.Errorf("%d creates, want 3 (one, the 429, its retry)", n)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Errorf("the retried create returned %v after the 429, before its Retry-After of 1s", waited)
	}
}

// Two clusters share an account: neither sees, lists, adopts nor deletes
// the other's droplets.
func TestAnotherClustersDropletsDoNotExist(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := dotest.New(t)
	ours, theirs := newProvider(t, fake, clusterID, time.Minute), newProvider(t, fake, "other-cluster", time.Minute)
	inst, err := theirs.Create(ctx, createRequest("00000007-0000-0000-0000-000000000000", nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ours.Get(ctx, inst.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get of another cluster's droplet: %v, want ErrNotFound", err)
	}
	if err := ours.Delete(ctx, inst.ID); err != nil {
		t.Errorf("Delete of another cluster's droplet: %v", err)
	}
	listed, err := ours.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue)
	if err != nil || len(listed) != 0 {
		t.Errorf("ListByTag: %v, %v; want nothing", listed, err)
	}
	if n := len(fake.Droplets()); n != 1 {
		t.Errorf("%d droplets, want the other cluster's one untouched", n)
	}
	theirsListed, err := theirs.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue)
	if err != nil || len(theirsListed) != 1 || theirsListed[0].ID != inst.ID || theirsListed[0].CreatedAt.IsZero() {
		t.Errorf("the owner's ListByTag: %+v, %v; want its droplet with its creation time", theirsListed, err)
	}
	if err := theirs.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := theirs.Get(ctx, inst.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
}

func TestListByTagPagesPastTwoHundred(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := dotest.New(t)
	p := newProvider(t, fake, clusterID, time.Minute)
	for i := range 205 {
		if _, err := p.Create(ctx, createRequest(fmt.Sprintf("%08d-0000-0000-0001-000000000000", 100+i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	listed, err := p.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue)
	if err != nil || len(listed) != 205 {
		t.Errorf("listed %d droplets (%v), want 205", len(listed), err)
	}
}

// The provider's whole life (create, get, list, delete) needs exactly the
// scopes docs/digitalocean.md lists for the operator's token, and each of
// them: without one, the call that needs it is refused.
func TestDocumentedScopesSufficeAndEachIsNeeded(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	life := func(fake *dotest.Fake) error {
		p := newProvider(t, fake, clusterID, time.Minute)
		inst, err := p.Create(ctx, createRequest("00000009-0000-0000-0000-000000000000", nil))
		if err != nil {
			return err
		}
		if _, err := p.Get(ctx, inst.ID); err != nil {
			return err
		}
		if _, err := p.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue); err != nil {
			return err
		}
		return p.Delete(ctx, inst.ID)
	}
	fake := dotest.New(t)
	if err := life(fake); err != nil {
		t.Fatalf("with the documented scopes: %v", err)
	}
	used := fake.UsedPermissions()
	if diff := cmp.Diff([]string{"droplet:create", "droplet:delete", "droplet:read", "tag:create"}, used); diff != "" {
		t.Errorf("scopes used (-want +got):\n%s", diff)
	}
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "docs", "digitalocean.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, scope := range dotest.Scopes {
		if !strings.Contains(string(doc), "`"+scope+"`") {
			t.Errorf("docs/digitalocean.md does not list the scope %s", scope)
		}
	}
	for _, scope := range used {
		fewer := slices.DeleteFunc(slices.Clone(dotest.Scopes), func(s string) bool { return s == scope })
		if err := life(dotest.New(t, dotest.WithScopes(fewer...))); provider.Class(err) != provider.ErrPermanent || !strings.Contains(err.Error(), "scope "+scope) {
			t.Errorf("without %s: %v, want a permanent error naming it", scope, err)
		}
	}
}
