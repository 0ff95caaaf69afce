package digitalocean_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/godo"
	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/dotest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// firewallFake is a fake whose token has the firewall scopes too.
func firewallFake(t *testing.T, opts ...dotest.Option) *dotest.Fake {
	return dotest.New(t, append(opts, dotest.WithScopes(append(slices.Clone(dotest.Scopes), dotest.FirewallScopes...)...))...)
}

func allowFromSpec() *crawlv1alpha1.DigitalOceanProvider {
	return &crawlv1alpha1.DigitalOceanProvider{AllowFrom: []crawlv1alpha1.CIDR{"203.0.113.0/24", "2001:db8:7::/48"}, Port: 3129}
}

// TestAllowFromOwnsOneFirewallPerSettingAndSweepsIt: two Proxies with the
// same allowFrom share one firewall, made once although its first create's
// answer was lost (found by name on the retry), admitting only the proxy
// port from those ranges, all outbound, applied by its tag to both
// droplets; another cluster's is its own and survives this cluster's
// sweep; a firewall whose droplets are gone is deleted.
func TestAllowFromOwnsOneFirewallPerSettingAndSweepsIt(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := firewallFake(t)
	p := newProvider(t, fake, clusterID, time.Nanosecond) // no settle: the sweep may delete at once
	other := newProvider(t, fake, "other-cluster", time.Nanosecond)

	fake.LoseNextAnswers(dotest.CreateFirewall, 1)
	if _, err := p.Create(ctx, createRequest("00000001-0000-0000-0000-000000000000", allowFromSpec())); provider.Class(err) != provider.ErrTransient {
		t.Fatalf("create with the firewall's answer lost: %v, want a transient error", err)
	}
	var ids []string
	for _, uid := range []string{"00000001-0000-0000-0000-000000000000", "00000002-0000-0000-0000-000000000000"} {
		inst, err := p.Create(ctx, createRequest(uid, allowFromSpec()))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := inst.Tags["crawl.proxyfleet.io/firewall"]; ok {
			t.Errorf("the firewall tag is reported as a Proxy tag: %v", inst.Tags)
		}
		ids = append(ids, inst.ID)
	}
	if _, err := other.Create(ctx, createRequest("00000003-0000-0000-0000-000000000000", allowFromSpec())); err != nil {
		t.Fatal(err)
	}
	fws := fake.Firewalls()
	if len(fws) != 2 || fake.Calls(dotest.CreateFirewall) != 2 {
		t.Fatalf("%d firewalls after %d creates, want one per cluster after 2: %+v", len(fws), fake.Calls(dotest.CreateFirewall), fws)
	}
	droplets := fake.Droplets()
	ours := fws[0]
	var rules []string
	for _, r := range ours.InboundRules {
		rules = append(rules, "in "+r.Protocol+" "+r.PortRange+" from "+strings.Join(r.Sources.Addresses, ","))
	}
	for _, r := range ours.OutboundRules {
		rules = append(rules, "out "+r.Protocol+" "+r.PortRange+" to "+strings.Join(r.Destinations.Addresses, ","))
	}
	want := map[string]any{
		"rules": []string{
			"in tcp 3129 from 203.0.113.0/24,2001:db8:7::/48",
			"out tcp all to 0.0.0.0/0,::/0", "out udp all to 0.0.0.0/0,::/0", "out icmp  to 0.0.0.0/0,::/0",
		},
		"applied": []int{droplets[0].ID, droplets[1].ID},
	}
	if diff := cmp.Diff(want, map[string]any{"rules": rules, "applied": ours.AppliedTo}); diff != "" {
		t.Errorf("this cluster's firewall (-want +got):\n%s", diff)
	}

	if n, err := p.Sweep(ctx); n != 0 || err != nil {
		t.Errorf("sweep with droplets live = %d, %v; want 0 deleted", n, err)
	}
	for _, id := range ids {
		if err := p.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := p.Sweep(ctx); n != 1 || err != nil {
		t.Errorf("sweep with no droplet left = %d, %v; want 1 deleted", n, err)
	}
	if left := fake.Firewalls(); len(left) != 1 || left[0].Name != fws[1].Name {
		t.Errorf("firewalls left %+v, want the other cluster's only", left)
	}
}

// TestSweepKeepsAFirewallACreateJustUsed: the tag listing lags behind a
// create, so a firewall a create of this process used within the settle
// time is kept even though no droplet is listed with its tag yet.
func TestSweepKeepsAFirewallACreateJustUsed(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := firewallFake(t, dotest.WithListLag(5))
	p := newProvider(t, fake, clusterID, time.Hour)
	if _, err := p.Create(ctx, createRequest("00000001-0000-0000-0000-000000000000", allowFromSpec())); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Sweep(ctx); n != 0 || err != nil || len(fake.Firewalls()) != 1 {
		t.Errorf("sweep = %d, %v with %d firewalls left; want the just-used one kept", n, err, len(fake.Firewalls()))
	}
}

// TestFirewallScopesDocumentedAndEachNeeded: with allowFrom the provider's
// life (create, sweep) needs exactly the documented firewall scopes
// besides the base ones, and fails naming each one it lacks.
func TestFirewallScopesDocumentedAndEachNeeded(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	all := append(slices.Clone(dotest.Scopes), dotest.FirewallScopes...)
	life := func(fake *dotest.Fake) error {
		p := newProvider(t, fake, clusterID, time.Nanosecond)
		inst, err := p.Create(ctx, createRequest("00000009-0000-0000-0000-000000000000", allowFromSpec()))
		if err != nil {
			return err
		}
		if err := p.Delete(ctx, inst.ID); err != nil {
			return err
		}
		_, err = p.Sweep(ctx)
		return err
	}
	fake := dotest.New(t, dotest.WithScopes(all...))
	if err := life(fake); err != nil {
		t.Fatalf("with the documented scopes: %v", err)
	}
	if diff := cmp.Diff([]string{"droplet:create", "droplet:delete", "droplet:read", "firewall:create", "firewall:delete", "firewall:read", "tag:create"}, fake.UsedPermissions()); diff != "" {
		t.Errorf("scopes used (-want +got):\n%s", diff)
	}
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "docs", "digitalocean.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, scope := range dotest.FirewallScopes {
		if !strings.Contains(string(doc), "`"+scope+"`") {
			t.Errorf("docs/digitalocean.md does not list the scope %s", scope)
		}
		fewer := slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s == scope })
		if err := life(dotest.New(t, dotest.WithScopes(fewer...))); provider.Class(err) != provider.ErrPermanent || !strings.Contains(err.Error(), "scope "+scope) {
			t.Errorf("without %s: %v, want a permanent error naming it", scope, err)
		}
	}
}

// Two cluster IDs whose SHA-256 starts with the same 32 bits (cb802159),
// found by a birthday search over "cluster-<n>".
const collidingA, collidingB = "cluster-106014", "cluster-117702"

// TestSweepLeavesAnotherClusterWithTheSame32BitHashAlone: the firewall of
// a cluster whose ID hashes to the same first 32 bits as ours, in use by
// its droplet, is not ours: our sweep deletes nothing of it, as its name
// carries the whole hash of its cluster ID.
func TestSweepLeavesAnotherClusterWithTheSame32BitHashAlone(t *testing.T) {
	a, b := sha256.Sum256([]byte(collidingA)), sha256.Sum256([]byte(collidingB))
	if !bytes.Equal(a[:4], b[:4]) {
		t.Fatalf("the cluster IDs %q and %q do not share 32 bits of hash", collidingA, collidingB)
	}
	_, ctx := ktesting.NewTestContext(t)
	fake := firewallFake(t)
	ours, theirs := newProvider(t, fake, collidingA, time.Nanosecond), newProvider(t, fake, collidingB, time.Nanosecond)
	if _, err := theirs.Create(ctx, createRequest("00000001-0000-0000-0000-000000000000", allowFromSpec())); err != nil {
		t.Fatal(err)
	}
	if n, err := ours.Sweep(ctx); n != 0 || err != nil || len(fake.Firewalls()) != 1 {
		t.Errorf("our sweep = %d, %v with %d firewalls left; want the other cluster's kept", n, err, len(fake.Firewalls()))
	}
}

// TestSweepDeletesTheTwinAnOlderOperatorNamed: a firewall an operator
// before record 0431 made (named with 32 bits of the cluster's hash) has a
// twin once a create of the same setting makes it under the whole hash;
// while a droplet carries their tag both stay, then one sweep deletes
// both. Another cluster's firewall of that old shape is never touched.
func TestSweepDeletesTheTwinAnOlderOperatorNamed(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := firewallFake(t)
	p := newProvider(t, fake, collidingA, time.Nanosecond)
	client := godo.NewFromToken(dotest.Token)
	client.BaseURL, _ = url.Parse(fake.URL + "/")
	old := func(cluster string) {
		sum := sha256.Sum256([]byte(cluster))
		key := cloudkit.AllowFromKey(3129, allowFromSpec().AllowFrom, cluster)
		tag, _ := cloudkit.FlatTag("crawl.proxyfleet.io/firewall", key)
		if _, _, err := client.Tags.Create(ctx, &godo.TagCreateRequest{Name: tag}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := client.Firewalls.Create(ctx, &godo.FirewallRequest{Name: "pxo-" + hex.EncodeToString(sum[:4]) + "-" + key, Tags: []string{tag}}); err != nil {
			t.Fatal(err)
		}
	}
	old(collidingA)
	old(collidingB)
	inst, err := p.Create(ctx, createRequest("00000001-0000-0000-0000-000000000000", allowFromSpec()))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := p.Sweep(ctx); n != 0 || err != nil || len(fake.Firewalls()) != 3 {
		t.Errorf("sweep with the droplet live = %d, %v with %d firewalls left; want all 3 kept", n, err, len(fake.Firewalls()))
	}
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	n, err := p.Sweep(ctx)
	if left := fake.Firewalls(); n != 2 || err != nil || len(left) != 1 || !strings.HasSuffix(left[0].Name, cloudkit.AllowFromKey(3129, allowFromSpec().AllowFrom, collidingB)) {
		t.Errorf("sweep = %d, %v, left %+v; want our two deleted, the other cluster's kept", n, err, left)
	}
}
