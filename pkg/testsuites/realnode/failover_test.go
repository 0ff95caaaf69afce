//go:build realnode

package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// leaderFailover: the Pod of the replica that leads the lease store
// deleted, then (second round) its container killed with SIGKILL through
// containerd, while an acquire goes through the leases Service every 50 ms
// and a lease granted before is renewed every 100 ms. Another replica leads
// the store and grants (the time from the kill to the first grant, and to
// the first renewal, of calls sent after it is measured and reported, not
// asserted); no answer is Recovering (the store's state is replicated, so
// nothing is waited out); the lease granted before renews; nothing is
// granted twice; the controllers' Lease follows the store's leader; and the
// Deployment (or the kubelet) brings the replica back.
func leaderFailover(t *testing.T, s *suite) {
	s.startLoadProxy(t)
	load := s.startLeaseLoad(t)
	for _, round := range []struct {
		name string
		kill func(t *testing.T, s *suite, leader corev1.Pod)
	}{
		{"Pod deleted", func(t *testing.T, s *suite, leader corev1.Pod) {
			s.run(t, "kubectl", "delete", "pod", "-n", operatorNamespace, leader.Name, "--wait=false")
		}},
		{"container killed with SIGKILL", func(t *testing.T, s *suite, leader corev1.Pod) {
			id := strings.TrimPrefix(leader.Status.ContainerStatuses[0].ContainerID, "containerd://")
			s.run(t, "ctr", "--address", filepath.Join(s.root, ".cluster", "containerd", "containerd.sock"),
				"-n", "k8s.io", "tasks", "kill", "--signal", "SIGKILL", id)
		}},
	} {
		t.Run(round.name, func(t *testing.T) {
			// The step before restarts the API server, and the round before
			// replaces a replica: wait for the whole group, one leader of
			// the store holding the controllers' Lease too.
			var old corev1.Pod
			waitFor(t, 2*time.Minute, "three voters, one leader of the store and the controllers", func(ctx context.Context) error {
				_, ready, label, err := s.operatorPods(ctx)
				if err != nil {
					return err
				}
				p, voters, err := s.raftLeader(ctx)
				switch {
				case err != nil:
					return err
				case ready != replicas || voters != replicas:
					return fmt.Errorf("%d Ready, %d voters", ready, voters)
				case label != p.Name:
					return fmt.Errorf("%s holds the controllers' Lease, %s leads the store", label, p.Name)
				}
				old = p
				return nil
			})
			transitions := s.leaderTransitions(t)
			began := time.Now()
			round.kill(t, s, old)
			var grant, renewal answer
			waitFor(t, time.Minute, "a grant and a renewal through the leases Service of calls sent after the kill", func(context.Context) error {
				var ok1, ok2 bool
				grant, ok1 = load.first("acquire", http.StatusCreated, began)
				renewal, ok2 = load.first("renew", http.StatusOK, began)
				if !ok1 || !ok2 {
					return fmt.Errorf("granted %v, renewed %v; answers since: %s", ok1, ok2, formatTally(load.tally(began, time.Now())))
				}
				return nil
			})
			toGrant, toRenewal := grant.answered.Sub(began), renewal.answered.Sub(began)
			window := began.Add(max(toGrant, toRenewal) + time.Second)
			t.Logf("leader %s %s → first new grant through the leases Service %v after (sent %v after), first renewal %v; answers to calls sent until a second after: %s",
				old.Name, round.name, toGrant.Round(time.Millisecond), grant.sent.Sub(began).Round(time.Millisecond), toRenewal.Round(time.Millisecond), formatTally(load.tally(began, window)))
			s.report.addExact("leader "+round.name+" → first new grant through the leases Service", toGrant)
			s.report.addExact("leader "+round.name+" → first renewal through the leases Service", toRenewal)

			// Controllers follow the store's leader: after a kill, once
			// the old holder's Lease has expired.
			waitFor(t, time.Minute, "a new leader of the controllers, renewing the lease", func(ctx context.Context) error {
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
			t.Logf("%s → new controllers' leader renewing: %s", round.name, time.Since(began).Round(100*time.Millisecond))
			s.report.add("leader "+round.name+" → new leader of the controllers renews a lease", time.Since(began))
			s.heldLeaseKnown(t)
			waitFor(t, 2*time.Minute, "three Ready replicas again", func(ctx context.Context) error {
				pods, ready, _, err := s.operatorPods(ctx)
				if err != nil {
					return err
				}
				if len(pods) != replicas || ready != replicas {
					return fmt.Errorf("%d Pods, %d Ready", len(pods), ready)
				}
				return nil
			})
			if n := load.count("Recovering", began, time.Now()); n > 0 {
				t.Errorf("%d lease calls answered 503 Recovering after the %s: a replicated store has nothing to wait out", n, round.name)
			}
		})
	}
	load.stop()
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

// heldLeaseKnown checks that the new leader knows the lease granted
// before the failover on a maxLeases-1 proxy: acquires of the crawl
// namespace get every other proxy (the pool's members), never the held
// one, and then 503 NoneFree; the leases they got are released.
func (s *suite) heldLeaseKnown(t *testing.T) {
	t.Helper()
	var granted []lease
	defer func() {
		for _, l := range granted {
			s.leaseAnswer(t, "DELETE", "/v1/leases/"+l.ID, "")
		}
	}()
	for range 10 {
		code, body := s.leaseAnswer(t, "POST", "/v1/leases", `{"holder":"second","namespace":"crawl","ttl":"30s"}`)
		if code != http.StatusCreated {
			if code != http.StatusServiceUnavailable || !strings.Contains(body, `"NoneFree"`) {
				t.Errorf("acquire while the lease is held: %d %s, want 201 or 503 NoneFree", code, body)
			}
			return
		}
		var l lease
		if err := json.Unmarshal([]byte(body), &l); err != nil {
			t.Fatal(err)
		}
		granted = append(granted, l)
		if l.Proxy.Name == s.lease.Proxy.Name {
			t.Errorf("acquire while the lease on %s is held got %s: the new leader forgot the lease", s.lease.Proxy.Name, l.Proxy.Name)
			return
		}
	}
	t.Errorf("10 acquires of the crawl namespace all granted (%d proxies?), never 503", len(granted))
}
