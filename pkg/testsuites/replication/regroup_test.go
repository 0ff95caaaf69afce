package replication_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

// regroupTimeout bounds the regroup: the lost quorum must last 10 s, the
// replicas restart, and the new group must form.
const regroupTimeout = time.Minute

// restartExited starts again every replica whose process has exited, as
// the kubelet restarts a container (with its emptyDir). Tests call it from
// their polls.
func (g *group) restartExited(stopped ...*replicaProc) {
	g.t.Helper()
	for _, r := range g.replicas {
		if !r.proc.Running() && !slices.Contains(stopped, r) {
			g.t.Logf("%s %s; restarting it", r.name, r.proc.Exit())
			g.start(r)
		}
	}
}

// TestLostQuorumRegroupsBehindTheHorizon (issue 62): two of three replicas'
// Pods are lost at once (a node with both goes), and their Deployment
// makes two new Pods. The survivor cannot be elected alone and nobody can
// remove the lost members: the quorum is lost for good. After 10 s the
// survivor wins the marker's next generation, every replica restarts, the
// survivor leads the new generation from its own log, the newcomers join,
// and the new group grants nothing until every lease the old group could
// have granted has ended (the maximum TTL and the clock skew after the
// regroup); a lease granted before renews throughout (its ID re-learned),
// and the ban the old group recorded holds after.
func TestLostQuorumRegroupsBehindTheHorizon(t *testing.T) {
	// Each poll's calls are bounded: the client retries a replica that is
	// down or knows no leader until its context ends, and a poll that
	// waits on one never restarts the replicas that exited to regroup.
	const callTimeout = 2 * time.Second
	const maxTTL = 20 * time.Second
	g := newGroup(t, 3, "--lease-max-ttl="+maxTTL.String())
	g.voters(startTimeout)
	g.fleet(3)
	old := g.leader(startTimeout)
	held, err := old.api.Acquire(t.Context(), client.AcquireRequest{Holder: "keeper", Namespace: g.ns, TTL: maxTTL})
	if err != nil {
		t.Fatal(err)
	}
	banned, err := old.api.Acquire(t.Context(), client.AcquireRequest{Holder: "banned", Namespace: g.ns, Domain: "ban.example"})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.api.Release(t.Context(), banned.ID, client.OutcomeBanned, ""); err != nil {
		t.Fatal(err)
	}

	var survivor *replicaProc
	for _, r := range g.replicas {
		if r != old && survivor == nil {
			survivor = r
			continue
		}
		r.proc.Kill()
		zero := int64(0)
		if err := g.kube.CoreV1().Pods(g.ns).Delete(t.Context(), r.name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	g.replicas = []*replicaProc{survivor, g.newReplica("replica-3"), g.newReplica("replica-4")}
	for _, r := range g.replicas[1:] {
		g.start(r)
	}

	// The keeper renews its lease throughout, through any replica that answers.
	eventually.Check(t, regroupTimeout, 200*time.Millisecond, "the group regrouped behind its survivor", func(ctx context.Context) error {
		g.restartExited()
		ctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		if l, err := survivor.api.Renew(ctx, held.ID, maxTTL); err == nil {
			held = l
		}
		cm, err := g.kube.CoreV1().ConfigMaps(g.ns).Get(ctx, "proxy-operator-replicas", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cm.Data["generation"] != "2" || cm.Data["bootstrappedBy"] != survivor.uid {
			return fmt.Errorf("marker: %v", cm.Data)
		}
		return nil
	})
	cm, err := g.kube.CoreV1().ConfigMaps(g.ns).Get(t.Context(), "proxy-operator-replicas", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	regroupedAt, err := time.Parse(time.RFC3339Nano, cm.Data["bootstrappedAt"])
	if err != nil {
		t.Fatal(err)
	}
	recoverUntil := regroupedAt.Add(maxTTL + 2*time.Second) // --max-clock-skew's default

	// Until recoverUntil: no grant, the keeper renews. After: grants, the ban holds.
	var granted *client.Lease
	refusals := 0
	eventually.Check(t, regroupTimeout, 200*time.Millisecond, "a grant by the new group", func(ctx context.Context) error {
		g.restartExited()
		ctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		if l, err := g.replicas[0].api.Renew(ctx, held.ID, maxTTL); err == nil {
			held = l
		} else if errors.Is(err, client.ErrLeaseLost) {
			t.Fatalf("the lease granted before the lost quorum was lost: %v", err)
		}
		l, err := g.replicas[1].api.Acquire(ctx, client.AcquireRequest{Holder: "banned", Namespace: g.ns, Domain: "ban.example"})
		if err != nil {
			var apiErr *client.Error
			if errors.As(err, &apiErr) && apiErr.Code == "Recovering" {
				refusals++
			}
			return err
		}
		granted = l
		return nil
	})
	answered := time.Now()
	if answered.Before(recoverUntil) {
		t.Errorf("the new group granted at %v, before every lease of the old one had ended (%v)", answered, recoverUntil)
	}
	if refusals == 0 {
		t.Error("no acquire was refused as Recovering while the new group recovered")
	}
	if granted.Proxy.Name == banned.Proxy.Name {
		t.Errorf("after the regroup, %s was granted for the site that banned it", granted.Proxy.Name)
	}
	if _, err := g.replicas[2].api.Renew(t.Context(), held.ID, maxTTL); err != nil {
		t.Errorf("renewing the lease granted before the lost quorum: %v", err)
	}
	g.voters(regroupTimeout)

	events, err := g.kube.CoreV1().Events(g.ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=proxy-operator-replicas"})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range events.Items {
		reasons = append(reasons, e.Reason)
	}
	if !slices.Contains(reasons, "Regrouped") {
		t.Errorf("events on the marker: %s; want a Regrouped", strings.Join(reasons, ", "))
	}
	t.Logf("regrouped %v after the loss; %d acquires refused as Recovering; first grant %v after the regroup (recovery ends %v after it)",
		regroupedAt.Sub(cmTime(cm)), refusals, answered.Sub(regroupedAt).Round(time.Millisecond), recoverUntil.Sub(regroupedAt))
}

// cmTime is when the marker was made (its creation, to the second).
func cmTime(cm interface{ GetCreationTimestamp() metav1.Time }) time.Time {
	return cm.GetCreationTimestamp().Time
}
