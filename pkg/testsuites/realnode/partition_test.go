//go:build realnode

package realnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// partitionChain holds the test's packet filter. hack/cluster's down removes
// chains with this prefix too, should a run die before its cleanup.
const partitionChain = "PO-E2E-PARTITION"

// leaderPartitioned (issue 37): the leader's Pod cut off from the API server
// by a real packet filter. The old leader stops leading within its renew
// deadline, another replica leads after the lease duration, the lease
// granted before renews on it, and its proxy (which takes one lease) is
// granted to no other acquire anywhere while that lease is held: no proxy
// is leased twice across them. The filter goes, and the old leader rejoins as a standby.
func leaderPartitioned(t *testing.T, s *suite) {
	var pods []corev1.Pod
	var leader string
	waitFor(t, time.Minute, "one leader before the cut", func(ctx context.Context) error {
		var err error
		pods, _, leader, err = s.operatorPods(ctx)
		if err == nil && leader == "" {
			err = errors.New("no leader")
		}
		return err
	})
	var leaderIP string
	for _, p := range pods {
		if p.Name == leader {
			leaderIP = p.Status.PodIP
		}
	}
	transitions := s.leaderTransitions(t)
	began := time.Now()
	cut(t, leaderIP)

	grants := 0
	waitFor(t, 2*time.Minute, "the standby leading and renewing the lease", func(ctx context.Context) error {
		// Whoever answers (the Service may still route to the old leader),
		// the held proxy (maxLeases 1) is never granted; the pool's free
		// members may be, and are released again.
		if code, body := s.leaseCall(t, "POST", "/v1/leases", `{"holder":"second","namespace":"crawl","ttl":"30s"}`); code == 201 {
			var l lease
			if err := json.Unmarshal([]byte(body), &l); err != nil {
				return err
			}
			s.leaseCall(t, "DELETE", "/v1/leases/"+l.ID, "")
			if l.Proxy.Name == s.lease.Proxy.Name {
				grants++
				return fmt.Errorf("the held proxy %s granted during the partition: %s", l.Proxy.Name, body)
			}
		}
		if now := s.leaderTransitions(t); now == transitions {
			return errors.New("no new leader yet")
		}
		if code, body := s.leaseCall(t, "POST", "/v1/leases/"+s.leaseID+"/renew", `{"ttl":"5m"}`); code != 200 {
			return fmt.Errorf("renew: %d %s", code, body)
		}
		return nil
	})
	if grants > 0 {
		t.Errorf("%d acquires granted the held proxy while its one lease was held", grants)
	}
	t.Logf("leader %s partitioned → new leader renewing: %s", leader, time.Since(began).Round(100*time.Millisecond))
	s.report.add("leader cut off from the API server → new leader renews a lease", time.Since(began))

	heal(t)
	waitFor(t, 2*time.Minute, "three Ready replicas and one leader after the partition", func(ctx context.Context) error {
		pods, ready, leader, err := s.operatorPods(ctx)
		if err != nil {
			return err
		}
		if len(pods) != replicas || ready != replicas || leader == "" {
			return fmt.Errorf("%d Pods, %d Ready, leader %q", len(pods), ready, leader)
		}
		return nil
	})
	s.heldLeaseKnown(t)
}

// cut drops the packets from ip to the API server's port on the node (a
// Pod reaches it through the kubernetes Service, DNATed to the node), and
// removes the filter when the test ends, whatever happened. The filter sits
// in mangle's INPUT, which every packet for the node crosses before
// filter's: kube-router keeps its own jump first in filter's INPUT and
// accepts there what a NetworkPolicy allows, so a rule in filter's INPUT
// could be passed over.
func cut(t *testing.T, ip string) {
	t.Cleanup(func() { heal(t) })
	for _, args := range [][]string{
		{"-N", partitionChain},
		{"-A", partitionChain, "-s", ip, "-p", "tcp", "--dport", "6443", "-j", "DROP"},
		{"-I", "INPUT", "1", "-j", partitionChain},
	} {
		if out, err := exec.Command("iptables", append([]string{"-w", "-t", "mangle"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}

func heal(t *testing.T) {
	for _, args := range [][]string{
		{"-D", "INPUT", "-j", partitionChain},
		{"-F", partitionChain},
		{"-X", partitionChain},
	} {
		_ = exec.Command("iptables", append([]string{"-w", "-t", "mangle"}, args...)...).Run()
	}
	if out, _ := exec.Command("iptables", "-w", "-t", "mangle", "-S").Output(); strings.Contains(string(out), partitionChain) {
		t.Errorf("the partition filter is still there:\n%s", out)
	}
}
