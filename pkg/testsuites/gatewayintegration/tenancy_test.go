package gatewayintegration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
)

// One tenant never reaches another through the gateway tier (issue 48):
// each test runs a gateway-tier replica (tierDoors) against the lease API,
// both on the real API server.

// TestSessionBelongsToItsCaller: a second identity sending the same
// session- term gets a session and a lease of its own, on another
// upstream, instead of riding the first caller's lease and credentials;
// the first caller's session keeps its upstream.
func TestSessionBelongsToItsCaller(t *testing.T) {
	h := startHarness(t, "gw-owner", harnessOptions{})
	ups := []*upstream{h.namedUpstream(t, "owner-a", "own", 10), h.namedUpstream(t, "owner-b", "own", 20)}
	alice, bob := h.crawler(t, "alice", true), h.crawler(t, "bob", true)
	target := startTarget(t)

	const username = "ns-gw-owner+pool-own+session-shared"
	var got []string
	for _, token := range []string{alice, bob, alice} {
		f := h.fetchFrom(t, "127.0.0.1", username, token, target.URL+"/echo", nil)
		if f.status != http.StatusOK {
			t.Fatalf("GET through the gateway: %v", f)
		}
		got = append(got, servedVia(ups, f))
	}
	// owner-a first: both are free and it is the faster.
	if diff := cmp.Diff([]string{"owner-a", "owner-b", "owner-a"}, got); diff != "" {
		t.Errorf("upstreams of alice, bob, alice on one session name (-want +got):\n%s", diff)
	}
	owners := map[string]string{}
	for _, l := range h.gatewayLeases(t) {
		name, _, _ := strings.Cut(l.Owner, "\x00")
		owners[name] += l.Proxy.Key.Name
	}
	want := map[string]string{
		"system:serviceaccount:gw-owner:alice": "owner-a",
		"system:serviceaccount:gw-owner:bob":   "owner-b",
	}
	if diff := cmp.Diff(want, owners); diff != "" {
		t.Errorf("the gateway's leases by owner (-want +got):\n%s", diff)
	}
	if n := h.gw.Sessions(); n != 2 {
		t.Errorf("the gateway keeps %d sessions, want 2 (one per caller)", n)
	}
	h.noCredentials(t, ups)
}

// TestReviewBudgetIsPerSourceAddress: a client with no credentials that
// sends invented tokens spends the TokenReview budget of its own address
// only, whatever address it claims in headers; a crawler connecting from
// another address gets its new token reviewed.
func TestReviewBudgetIsPerSourceAddress(t *testing.T) {
	h := startHarness(t, "gw-budget", harnessOptions{gatewayAuth: auth.KubernetesOptions{
		// Three new tokens per address, not refilled within the test; the
		// overall budget out of the way.
		TokenReviewPerSourceQPS: 0.001, TokenReviewPerSourceBurst: 3,
		TokenReviewQPS: 1000, TokenReviewBurst: 1000,
	}})
	ups := []*upstream{h.namedUpstream(t, "budget-a", "budget", 10)}
	crawler := h.crawler(t, "crawler", true)
	target := startTarget(t).URL + "/echo"
	const username = "ns-gw-budget+pool-budget"
	// The attacker claims the crawler's address in every header a proxy
	// in front might set.
	claims := http.Header{"X-Forwarded-For": {"127.0.0.3"}, "X-Real-Ip": {"127.0.0.3"}, "Forwarded": {"for=127.0.0.3"}}

	var got []int
	for i := range 5 {
		got = append(got, h.fetchFrom(t, "127.0.0.2", username, fmt.Sprintf("invented-token-%d", i), target, claims).status)
	}
	crawled := h.fetchFrom(t, "127.0.0.3", username, crawler, target, nil)
	got = append(got, crawled.status)
	got = append(got, h.fetchFrom(t, "127.0.0.2", username, "invented-token-5", target, claims).status)
	want := []int{
		// 127.0.0.2's three reviews (each rejects the token), then its
		// share is spent.
		http.StatusProxyAuthRequired, http.StatusProxyAuthRequired, http.StatusProxyAuthRequired,
		http.StatusServiceUnavailable, http.StatusServiceUnavailable,
		// The crawler, from 127.0.0.3: its own share.
		http.StatusOK,
		// 127.0.0.2 still has none.
		http.StatusServiceUnavailable,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("statuses (-want +got):\n%s\nthe crawler's answer: %v", diff, crawled)
	}
	h.noCredentials(t, ups)
}

// TestActForNeedsItsOwnGrant: act-for is not granted by any wildcard on
// proxies, nor by one over all of crawl.proxyfleet.io; the gateway's role
// of artifacts/rbac grants it, and the whole tier runs on that role.
func TestActForNeedsItsOwnGrant(t *testing.T) {
	h := startHarness(t, "gw-actfor", harnessOptions{})
	ups := []*upstream{h.namedUpstream(t, "actfor-a", "actfor", 10)}
	crawler := h.crawler(t, "crawler", true)
	// The crawler as the gateway's TokenReview finds it.
	const user = "system:serviceaccount:gw-actfor:crawler"
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:gw-actfor", "system:authenticated"}
	actingFor := func(t *testing.T, token string) error {
		c, err := client.New(h.leaseURL, client.WithToken(func(context.Context) (string, error) { return token, nil }))
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.ActingFor(user, "", groups).Acquire(t.Context(), client.AcquireRequest{Holder: "act-for-test", Namespace: "gw-actfor"})
		if err == nil {
			err = c.ActingFor(user, "", groups).Release(t.Context(), l.ID, client.OutcomeOK, "")
		}
		return err
	}
	// Each of these granted act-for when it was a verb on proxies/leases.
	// (RBAC has no "proxies/*": a subresource wildcard is "*/leases".)
	for _, tc := range []struct {
		name, slug string
		rule       rbacv1.PolicyRule
	}{
		{"every verb on proxies/leases", "proxies-leases", rbacv1.PolicyRule{APIGroups: []string{"crawl.proxyfleet.io"}, Resources: []string{"proxies/leases"}, Verbs: []string{"*"}}},
		{"every verb on every leases", "any-leases", rbacv1.PolicyRule{APIGroups: []string{"crawl.proxyfleet.io"}, Resources: []string{"*/leases"}, Verbs: []string{"*"}}},
		{"everything of crawl.proxyfleet.io", "whole-group", rbacv1.PolicyRule{APIGroups: []string{"crawl.proxyfleet.io"}, Resources: []string{"*"}, Verbs: []string{"*"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gw-actfor-" + tc.slug}, Rules: []rbacv1.PolicyRule{tc.rule}}
			err := actingFor(t, h.clusterServiceAccount(t, tc.slug, role))
			var apiErr *client.Error
			if !errors.As(err, &apiErr) || apiErr.Code != "Forbidden" || !strings.Contains(apiErr.Message, "may not act-for") {
				t.Errorf("acting for the crawler with %v: %v, want 403 Forbidden naming act-for", tc.rule, err)
			}
		})
	}
	t.Run("the gateway's role", func(t *testing.T) {
		if err := actingFor(t, h.clusterServiceAccount(t, "gateway", artifactRole(t, "gateway-role.yaml"))); err != nil {
			t.Errorf("acting for the crawler with artifacts/rbac/gateway-role.yaml: %v", err)
		}
		// And the tier's gateway, on that role, serves the crawler.
		if f := h.fetchFrom(t, "127.0.0.1", "ns-gw-actfor+pool-actfor", crawler, startTarget(t).URL+"/echo", nil); f.status != http.StatusOK {
			t.Errorf("GET through the tier's gateway: %v", f)
		}
	})
	h.noCredentials(t, ups)
}
