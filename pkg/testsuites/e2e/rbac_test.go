package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proxyfleet/proxy-operator/pkg/operator"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"

	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// need says which flow breaks without a permission, and why: the
// minimality test runs the operator without the permission and checks that
// this flow does not complete and that the operator met a Forbidden error.
type need struct {
	flow string
	why  string
	// env, when set, is the client environment under which the need shows
	// (see noStreamingLists).
	env []string
}

// noStreamingLists makes the operator's client-go list the way it does
// against an API server without streaming lists (the WatchList feature:
// off by default in Kubernetes 1.33 and before 1.32). Against one with them,
// as testenv's, client-go ≥ 0.35 fills its informers through a watch, and
// list on the informers' resources is never used (finding reported with
// issue 7): list is the fallback that keeps the operator working there.
var noStreamingLists = []string{"KUBE_FEATURE_WatchListClient=false"}

// needs covers every permission of the operator's roles, keyed by
// permission.String(). A permission of the artifacts missing here fails
// the test: find the flow that needs it, or drop it from the role.
var needs = map[string]need{
	"get proxies.crawl.proxyfleet.io": {flow: "gc",
		why: "orphan collection confirms with a live read that an instance's Proxy is gone before it deletes"},
	"list proxies.crawl.proxyfleet.io": {flow: "leader",
		why: "the Proxy informer lists where the API server cannot stream lists; without it the caches never sync and the leader never labels its Pod",
		env: noStreamingLists},
	"watch proxies.crawl.proxyfleet.io": {flow: "external",
		why: "the Proxy informer watches; without it changes arrive only with relists, each later than the last"},
	"update proxies.crawl.proxyfleet.io": {flow: "managed",
		why: "the finalizer and the spec-hash annotation are written with Update"},
	"update proxies/status.crawl.proxyfleet.io": {flow: "external",
		why: "status is written with UpdateStatus"},
	"create proxies.crawl.proxyfleet.io": {flow: "pool",
		why: "a ProxyPool creates its members"},
	"patch proxies.crawl.proxyfleet.io": {flow: "pool",
		why: "a ProxyPool marks a member draining with a patch before it deletes it"},
	"delete proxies.crawl.proxyfleet.io": {flow: "pool",
		why: "a ProxyPool deletes drained members"},
	"list proxypools.crawl.proxyfleet.io": {flow: "leader",
		why: "the ProxyPool informer lists where the API server cannot stream lists; without it the caches never sync",
		env: noStreamingLists},
	"watch proxypools.crawl.proxyfleet.io": {flow: "pool",
		why: "the ProxyPool informer watches; without it a new pool is seen only on a relist"},
	"update proxypools/status.crawl.proxyfleet.io": {flow: "pool",
		why: "the pool's status is written with UpdateStatus"},
	"update proxypools/scale.crawl.proxyfleet.io": {flow: "pool",
		why: "with spec.autoscaling the operator writes spec.replicas through the scale subresource"},
	"list crawlpolicies.crawl.proxyfleet.io": {flow: "leader",
		why: "the CrawlPolicy informer lists where the API server cannot stream lists; without it the caches never sync",
		env: noStreamingLists},
	"watch crawlpolicies.crawl.proxyfleet.io": {flow: "policy",
		why: "the CrawlPolicy informer watches; without it a new policy is seen only on a relist"},
	"update crawlpolicies/status.crawl.proxyfleet.io": {flow: "policy",
		why: "the policy's status is written with UpdateStatus"},
	"get secrets": {flow: "leader",
		why: "every replica reads the lease API's signing key Secret at start (and a Create retried after its cloud-init Secret was made reads that Secret back)"},
	"list secrets": {flow: "leader",
		why: "the Secret informer lists where the API server cannot stream lists; without it the caches never sync",
		env: noStreamingLists},
	"watch secrets": {flow: "retry",
		why: "the Secret informer watches; without it cloud-init edits arrive only with relists"},
	"create secrets": {flow: "leader",
		why: "the first replica creates the lease API's signing key Secret (and the kubernetes provider makes a cloud-init Secret per Pod)"},
	"update secrets": {flow: "retry",
		why: "a retried Create brings the provider's cloud-init Secret to the current content"},
	"delete secrets": {flow: "managed",
		why: "deleting an instance deletes its cloud-init Secret, and the finalizer waits for it (docs/decisions/0170-finalizer-goes-only-after-delete-succeeded.md)"},
	"get pods": {flow: "managed",
		why: "the kubernetes provider polls its Pod"},
	"list pods": {flow: "gc",
		why: "orphan collection lists Pods by tag"},
	"create pods": {flow: "managed",
		why: "instances are Pods"},
	"delete pods": {flow: "gc",
		why: "orphan collection (and Proxy deletion) deletes Pods"},
	"patch pods": {flow: "leader",
		why: "the leader labels its own Pod for the lease Service"},
	"create networkpolicies.networking.k8s.io": {flow: "managed",
		why: "every Pod instance gets a NetworkPolicy (egress; ingress with spec.kubernetes.allowFrom) before the Pod"},
	"update networkpolicies.networking.k8s.io": {flow: "retry",
		why: "a retried Create overwrites the NetworkPolicy an earlier attempt made"},
	"delete networkpolicies.networking.k8s.io": {flow: "managed",
		why: "deleting an instance deletes its NetworkPolicy"},
	"create events": {flow: "managed",
		why: "transitions are events (kubectl describe proxy)"},
	"patch events": {flow: "retry",
		why: "a repeated event is counted up with a patch"},
	"list events": {flow: "dashboard",
		why: "the dashboard's event cache lists the events of crawl.proxyfleet.io objects where the API server cannot stream lists; without it the cache never fills",
		env: noStreamingLists},
	"watch events": {flow: "dashboard",
		why: "the dashboard's event cache watches; without it new events arrive only with relists, each later than the last"},
	"list rolebindings.rbac.authorization.k8s.io": {flow: "dashboard",
		why: "the dashboard's RoleBinding cache lists where the API server cannot stream lists; without it a crawler bound in its namespace is never shown it",
		env: noStreamingLists},
	"watch rolebindings.rbac.authorization.k8s.io": {flow: "dashboard",
		why: "the dashboard's RoleBinding cache watches (and streams its lists); without it a crawler bound in its namespace is never shown it"},
	"create tokenreviews.authentication.k8s.io": {flow: "managed",
		why: "the lease API authenticates crawlers' tokens (--lease-auth=kubernetes)"},
	"create subjectaccessreviews.authorization.k8s.io": {flow: "managed",
		why: "the lease API authorizes crawlers' calls (--lease-auth=kubernetes)"},
	"get configmaps (Role)": {flow: "leader",
		why: "a new leader reads the lease API's horizon (how far ahead the last leader granted) before it labels its Pod"},
	"create configmaps (Role)": {flow: "leader",
		why: "the first leader creates the lease API's horizon before it labels its Pod"},
	"update configmaps (Role)": {flow: "managed",
		why: "the lease API claims and moves its horizon"},
	"get leases.coordination.k8s.io (Role)": {flow: "leader",
		why: "leader election reads the Lease"},
	"create leases.coordination.k8s.io (Role)": {flow: "leader",
		why: "leader election creates the Lease in a fresh namespace"},
	"update leases.coordination.k8s.io (Role)": {flow: "leader",
		why: "leader election renews (and releases) the Lease"},
}

// TestOperatorOnArtifactRBAC runs the operator on a token of the artifacts'
// ServiceAccount, bound by the artifacts' roles and nothing else, in the
// artifacts' namespace: every flow completes; the leader labels its Pod so
// that the lease Service selects it, and on SIGTERM it drops the label,
// releases the Lease and exits 0. The artifacts are enough for a client
// that streams its lists (against Kubernetes 1.34+) and for one that lists.
func TestOperatorOnArtifactRBAC(t *testing.T) {
	s := newSuite(t)
	tests := map[string]struct {
		in  installation
		env []string
	}{
		"as installed":       {in: installation{namespace: artifactNamespace}},
		"no streaming lists": {in: installation{namespace: "po-no-streaming", suffix: "no-streaming"}, env: noStreamingLists},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := s.artifacts.forInstallation(tc.in)
			start := time.Now()
			r := s.startRun(t, operatortest.DNSName(name), a, runOptions{args: []string{"-v=2"}, env: tc.env})
			results := r.runFlows(t.Context(), nil)
			for _, name := range slices.Sorted(maps.Keys(results)) {
				res := results[name]
				t.Logf("%v", res)
				if !res.completed() {
					t.Errorf("flow %v", res)
				}
			}
			if t.Failed() {
				return
			}
			t.Logf("every flow completed %v after the operator started", time.Since(start).Round(100*time.Millisecond))

			if code := r.op.terminate(t, 20*time.Second); code != 0 {
				t.Errorf("exit code %d after SIGTERM, want 0", code)
			}
			if err := r.leaderLabelled(t.Context(), false); err != nil {
				t.Errorf("after SIGTERM: %v", err)
			}
			lease, err := s.kube.CoordinationV1().Leases(r.ns).Get(t.Context(), operator.LeaseName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
				t.Errorf("after SIGTERM the Lease is still held by %q", *h)
			}
		})
	}
}

// TestEveryRBACVerbIsNeeded is the other half of the RBAC proof: for each
// verb of each rule of the operator's roles, the operator runs on the
// artifacts minus that one verb, and the flow that needs it (see needs)
// does not complete within its bound, while the operator's log or events
// show the API server's Forbidden for exactly that verb and resource.
//
// Up to maxConcurrentRuns operators run at once; each run stops as soon as
// its flow has broken.
func TestEveryRBACVerbIsNeeded(t *testing.T) {
	s := newSuite(t)
	perms := s.artifacts.permissions()
	var names []string
	for _, p := range perms {
		names = append(names, p.String())
		if _, ok := needs[p.String()]; !ok {
			t.Errorf("no flow is known to need %q: find one and add it to needs, or drop the verb from the role", p)
		}
	}
	for name := range needs {
		if !slices.Contains(names, name) {
			t.Errorf("needs lists %q, which the artifacts' roles do not grant (any more): remove it", name)
		}
	}
	if t.Failed() {
		return
	}

	start := time.Now()
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxConcurrentRuns)
	for i, p := range perms {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			t.Run(p.slug(), func(t *testing.T) {
				runWithout(t, s, i, p, needs[p.String()])
			})
		})
	}
	wg.Wait()
	t.Logf("%d permissions (rules × verbs) tested in %v", len(perms), time.Since(start).Round(time.Second))
}

// maxConcurrentRuns bounds the operator processes running at once: the
// machine has 2 cores, shared.
const maxConcurrentRuns = 3

// runWithout runs the operator on the artifacts minus p and checks that
// want.flow breaks, with a Forbidden for p in the operator's log or events.
func runWithout(t *testing.T, s *suite, i int, p permission, want need) {
	name := fmt.Sprintf("%02d-%s", i, p.slug())
	a := s.artifacts.forInstallation(installation{namespace: "po-" + name, suffix: name}).without(p)
	start := time.Now()
	r := s.startRun(t, name, a, runOptions{args: []string{"-v=2"}, env: want.env})

	results := r.runFlows(t.Context(), func(res flowResult) bool { return res.flow == want.flow && !res.completed() })
	got := results[want.flow]
	switch {
	case got.testErr != nil:
		t.Fatalf("flow %v", got)
	case got.completed():
		var broken []string
		for _, res := range results {
			if !res.completed() {
				broken = append(broken, res.String())
			}
		}
		if len(broken) == 0 {
			t.Fatalf("FINDING: without %q every flow completes: the role does not need it (%s?)", p, want.why)
		}
		t.Fatalf("without %q the %s flow completes (%s?), but these broke: %s", p, want.flow, want.why, strings.Join(broken, "; "))
	}

	forbidden := forbiddenPattern(p)
	var evidence string
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := eventually.Poll(ctx, pollInterval, func(ctx context.Context) error {
		if lines := r.op.logLines(forbidden); len(lines) > 0 {
			evidence = "log: " + lines[0]
			return nil
		}
		events, err := s.kube.CoreV1().Events(r.proxies).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range events.Items {
			if forbidden.MatchString(e.Message) {
				evidence = fmt.Sprintf("event %s on %s: %s", e.Reason, e.InvolvedObject.Name, e.Message)
				return nil
			}
		}
		return errors.New("no Forbidden error in the log or events")
	})
	if err != nil {
		t.Errorf("without %q the %s flow broke, but %v matching %s", p, want.flow, err, forbidden)
	}
	t.Logf("without %q: %v (after %v); evidence: %s", p, got, time.Since(start).Round(100*time.Millisecond), truncate(evidence, 400))
}

// forbiddenPattern matches the API server's RBAC refusal of p, as it
// appears in a log line (quotes escaped in structured values) or an event.
func forbiddenPattern(p permission) *regexp.Regexp {
	var resources []string
	for _, r := range p.resources {
		resources = append(resources, regexp.QuoteMeta(r))
	}
	return regexp.MustCompile(`cannot ` + regexp.QuoteMeta(p.verb) + ` resource \\*"(` + strings.Join(resources, "|") + `)\\*"`)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
