//go:build realnode

package realnode

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// leaderFailover: the leader's Pod deleted, then (second round) its container
// killed with SIGKILL through containerd: the standby leads within the lease
// duration, the lease granted before renews on it, nothing is granted twice,
// and the Deployment (or the kubelet) brings the replica back.
func leaderFailover(t *testing.T, s *suite) {
	for _, round := range []struct {
		name string
		kill func(t *testing.T, s *suite, leader string)
	}{
		{"Pod deleted", func(t *testing.T, s *suite, leader string) {
			s.run(t, "kubectl", "delete", "pod", "-n", operatorNamespace, leader, "--wait=false")
		}},
		{"container killed with SIGKILL", func(t *testing.T, s *suite, leader string) {
			p, err := s.kube.CoreV1().Pods(operatorNamespace).Get(context.Background(), leader, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
			s.run(t, "ctr", "--address", filepath.Join(s.root, ".cluster", "containerd", "containerd.sock"),
				"-n", "k8s.io", "tasks", "kill", "--signal", "SIGKILL", id)
		}},
	} {
		t.Run(round.name, func(t *testing.T) {
			// The step before restarts the API server, which may move the
			// lease: the old leader's label goes a moment after the new
			// one's comes, so wait for one leader first.
			var old string
			waitFor(t, time.Minute, "one leader before the round", func(ctx context.Context) error {
				var err error
				_, _, old, err = s.operatorPods(ctx)
				if err == nil && old == "" {
					err = errors.New("no leader")
				}
				return err
			})
			transitions := s.leaderTransitions(t)
			began := time.Now()
			round.kill(t, s, old)
			// A killed container restarts in its Pod and may win the election
			// again: a new term is a new acquisition, whichever Pod holds it.
			waitFor(t, time.Minute, "a new leader renewing the lease", func(ctx context.Context) error {
				_, _, leader, err := s.operatorPods(ctx)
				if err != nil {
					return err
				}
				if now := s.leaderTransitions(t); leader == "" || now == transitions {
					return fmt.Errorf("leader %q, %d election transitions", leader, now)
				}
				if code, body := s.leaseCall(t, "POST", "/v1/leases/"+s.leaseID+"/renew", `{"ttl":"5m"}`); code != 200 {
					return fmt.Errorf("renew: %d %s", code, body)
				}
				return nil
			})
			t.Logf("%s → new leader renewing: %s", round.name, time.Since(began).Round(100*time.Millisecond))
			s.report.add("leader "+round.name+" → new leader renews a lease", time.Since(began))
			// Still one lease on a maxLeases-1 proxy: the new leader knows it.
			if code, body := s.leaseAnswer(t, "POST", "/v1/leases", `{"holder":"second","namespace":"crawl"}`); code != 503 {
				t.Errorf("acquire while the lease is held: %d %s, want 503", code, body)
			}
			waitFor(t, 2*time.Minute, "two Ready replicas again", func(ctx context.Context) error {
				pods, ready, _, err := s.operatorPods(ctx)
				if err != nil {
					return err
				}
				if len(pods) != 2 || ready != 2 {
					return fmt.Errorf("%d Pods, %d Ready", len(pods), ready)
				}
				return nil
			})
		})
	}
}

// leaderTransitions counts the leader election Lease's changes of holder.
func (s *suite) leaderTransitions(t *testing.T) int32 {
	t.Helper()
	l, err := s.kube.CoordinationV1().Leases(operatorNamespace).Get(context.Background(), release, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.LeaseTransitions == nil {
		return 0
	}
	return *l.Spec.LeaseTransitions
}
