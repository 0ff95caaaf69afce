package replication_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

// TestReadyzWaitsForAVote: the metrics port's /readyz, the Pod's readiness
// probe in the chart, is 503 on a replica that is running with synced
// caches but is no member of the lease store's Raft group (its Pod lacks
// the replicas' label, so the leader does not add it), and 200 once the
// leader has added it and given it a vote; the leader's is 200 throughout.
// So the leases Service routes to no replica that cannot take calls, and a
// rolling update waits for each new replica to catch up.
func TestReadyzWaitsForAVote(t *testing.T) {
	g := newGroup(t, 1)
	leader := g.leader(startTimeout)

	late := g.newReplica("replica-late")
	patch := []byte(`{"metadata":{"labels":{"replicas-of":null}}}`)
	if _, err := g.kube.CoreV1().Pods(g.ns).Patch(t.Context(), late.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	g.replicas = append(g.replicas, late)
	g.start(late)
	readyz := func(ctx context.Context, r *replicaProc) (int, string, error) {
		code, body, err := r.proc.Get(ctx, "/readyz")
		return code, strings.TrimSpace(string(body)), err
	}
	eventually.Check(t, startTimeout, pollInterval, "the replica outside the group unready for want of a vote", func(ctx context.Context) error {
		code, body, err := readyz(ctx, late)
		if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "voting member") {
			return fmt.Errorf("/readyz: %d %q %v", code, body, err)
		}
		return nil
	})
	if code, body, err := readyz(t.Context(), leader); err != nil || code != http.StatusOK {
		t.Errorf("the leader's /readyz: %d %q %v, want 200", code, body, err)
	}

	patch = []byte(`{"metadata":{"labels":{"replicas-of":"` + g.ns + `"}}}`)
	if _, err := g.kube.CoreV1().Pods(g.ns).Patch(t.Context(), late.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	g.voters(startTimeout)
	eventually.Check(t, startTimeout, pollInterval, "the replica ready once it votes", func(ctx context.Context) error {
		if code, body, err := readyz(ctx, late); err != nil || code != http.StatusOK {
			return fmt.Errorf("/readyz: %d %q %v", code, body, err)
		}
		return nil
	})
}
