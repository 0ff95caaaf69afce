// Package cloudstorm is the fault storm every cloud provider's integration
// suite runs: a fleet of Proxies is created, some edited, some deleted,
// while the cloud's fake fails at random and loses answers; once the
// faults stop the fleet must converge with nothing leaked and no Proxy
// ever given a second instance. The storm and its verdict are the same
// for every cloud; a Cloud says how to read one cloud's fake.
package cloudstorm

import (
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/testing/controllertest"
)

// Cloud is what the storm needs of one cloud's fake, I being its instance.
type Cloud[I any] struct {
	// Noun names an instance in messages: "droplet", "server".
	Noun string
	// Proxy is a new Proxy of this cloud named name.
	Proxy func(name string) *crawlv1alpha1.Proxy
	// Edit changes a Proxy's spec so that its instance must be replaced.
	Edit func(*crawlv1alpha1.Proxy)
	// Creates and Mutations count the create calls, and the create and
	// delete calls, the fake has answered so far; Calls counts them all.
	Creates, Mutations, Calls func() int
	// MinCalls is how many calls the storm lasts at least.
	MinCalls int
	// StopFaults ends the random faults; Summary describes the calls made.
	StopFaults func()
	Summary    func() string
	// Live are the instances not on their way out; Created every instance
	// ever created.
	Live, Created func() []I
	// UID is the Proxy UID an instance carries.
	UID func(I) string
	// Matches: the Proxy's status names the instance, which carries the
	// Proxy's current spec hash.
	Matches func(*crawlv1alpha1.Proxy, I) bool
}

// Result is what the storm measured.
type Result struct {
	// Created is how many instances were created in all; Duplicates how
	// many Proxies had more instances created than they may.
	Created, Duplicates int
}

// Edited and Deleted are the Proxies the storm edits and deletes while the
// faults go on; the others (s08..s19) are left alone.
var (
	Edited  = []string{"s00", "s01", "s02", "s03"}
	Deleted = []string{"s04", "s05", "s06", "s07"}
)

// Run creates n Proxies s00.. through h, edits Edited and deletes Deleted
// under way, stops the faults once the edits and deletes have met them
// and MinCalls calls were made, then fails the test unless: every Proxy
// left converges on exactly one live instance, from its current spec;
// no instance of a deleted Proxy is left; no sample over five seconds
// after convergence shows a second instance of a Proxy; no Proxy never
// edited had more than one instance created, no deleted one more than
// one; and deleting the rest leaves nothing. The faults are the caller's
// to start.
func Run[I any](h *controllertest.Harness, n int, c Cloud[I]) Result {
	t := h.T
	t.Helper()
	uids := map[string]string{}
	for i := range n {
		p := h.Create(c.Proxy(fmt.Sprintf("s%02d", i)))
		uids[p.Name] = string(p.UID)
	}
	h.Eventually(time.Minute, "creates under way", func() (bool, string) {
		return c.Creates() >= n, fmt.Sprintf("%d creates", c.Creates())
	})
	for _, name := range Edited {
		h.Update(name, c.Edit)
	}
	for _, name := range Deleted {
		if err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(h.Ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The storm goes on until the edits and deletes have met it too, and
	// for at least MinCalls calls in all.
	before := c.Mutations()
	h.Eventually(time.Minute, "edits and deletes under way", func() (bool, string) {
		now, all := c.Mutations(), c.Calls()
		return now >= before+len(Edited)+len(Deleted) && all >= c.MinCalls,
			fmt.Sprintf("%d creates and deletes since the edits, %d calls", now-before, all)
	})
	c.StopFaults()
	t.Logf("storm over: %s", c.Summary())

	// A Proxy whose creates kept meeting faults waits out the Proxy
	// controller's per-item back-off, which doubles up to 5 minutes
	// (pkg/controller/controller.go): a create of several calls (Azure's VM,
	// NIC, public IP and their polls) can reach that cap under 20% faults,
	// and nothing else requeues it. So the fleet gets the cap and a minute to
	// converge; a fleet that converges sooner ends the wait sooner.
	h.Eventually(6*time.Minute, "the fleet converged", func() (bool, string) {
		return converged(h, c, uids)
	})

	// Converged: from now on every sample, one every quarter second over
	// five seconds (ten collector rounds at 500ms), holds one instance per
	// Proxy.
	samples := time.NewTicker(250 * time.Millisecond)
	defer samples.Stop()
	for i := range 20 {
		live := byUID(c, c.Live())
		for name, uid := range uids {
			if len(live[uid]) > 1 {
				t.Fatalf("sample %d after convergence: %s has %d live %ss: %+v", i, name, len(live[uid]), c.Noun, live[uid])
			}
		}
		<-samples.C
	}

	created := byUID(c, c.Created())
	res := Result{Created: len(c.Created())}
	for name, uid := range uids {
		switch {
		case slices.Contains(Deleted, name) && len(created[uid]) > 1:
			// Deleted early, it may never have had one at all.
			t.Errorf("%s was deleted and had %d %ss created, want at most 1", name, len(created[uid]), c.Noun)
			res.Duplicates++
		case !slices.Contains(Edited, name) && !slices.Contains(Deleted, name) && len(created[uid]) != 1:
			t.Errorf("%s was never edited and had %d %ss created, want 1", name, len(created[uid]), c.Noun)
			res.Duplicates++
		}
	}

	for name := range uids {
		_ = h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(h.Ctx, name, metav1.DeleteOptions{})
	}
	h.Eventually(time.Minute, "nothing left", func() (bool, string) {
		left := c.Live()
		return len(left) == 0, fmt.Sprintf("%ss %+v", c.Noun, left)
	})
	return res
}

// converged: every deleted Proxy gone with no live instance, every other
// one provisioned on exactly one live instance that matches its status;
// else what is not yet so.
func converged[I any](h *controllertest.Harness, c Cloud[I], uids map[string]string) (bool, string) {
	live := byUID(c, c.Live())
	for name, uid := range uids {
		p, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Get(h.Ctx, name, metav1.GetOptions{})
		if slices.Contains(Deleted, name) {
			if !apierrors.IsNotFound(err) || len(live[uid]) != 0 {
				return false, fmt.Sprintf("deleted %s: %v, live %ss %+v", name, err, c.Noun, live[uid])
			}
			continue
		}
		if err != nil {
			return false, err.Error()
		}
		if !meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned) ||
			len(live[uid]) != 1 || !c.Matches(p, live[uid][0]) {
			return false, fmt.Sprintf("%s: providerID %q, conditions %+v, live %ss %+v", name, p.Status.ProviderID, p.Status.Conditions, c.Noun, live[uid])
		}
	}
	return true, ""
}

// byUID groups instances by the Proxy UID they carry.
func byUID[I any](c Cloud[I], instances []I) map[string][]I {
	out := map[string][]I{}
	for _, in := range instances {
		out[c.UID(in)] = append(out[c.UID(in)], in)
	}
	return out
}
