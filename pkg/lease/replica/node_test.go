package replica

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/lease/storetest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

// group is replicas on loopback, one process: the peer port, Raft and the
// stores are real; only the processes are not.
type group struct {
	t     *testing.T
	ca    CA
	nodes []*Node
	stop  []context.CancelFunc
	errs  []chan error
}

// emptyGroup is a group of no replicas yet, with its CA.
func emptyGroup(t *testing.T) *group {
	t.Helper()
	ca, err := NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &group{t: t, ca: ca}
}

func newGroup(t *testing.T, n int) *group {
	t.Helper()
	g := emptyGroup(t)
	for i := range n {
		g.start(i)
	}
	if err := g.nodes[0].Bootstrap(); err != nil {
		t.Fatal(err)
	}
	g.waitLeader()
	for i := 1; i < n; i++ {
		if err := g.nodes[0].AddVoter(g.nodes[i].cfg.ID, g.nodes[i].cfg.Advertise); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (g *group) start(i int) { g.t.Helper(); g.startReading(i, store.Version{}) }

// startReading starts replica i as one that reads only reads (zero: this
// release's).
func (g *group) startReading(i int, reads store.Version) {
	g.t.Helper()
	tlsConfig, err := g.ca.PeerTLS("r"+strconv.Itoa(i), time.Now())
	if err != nil {
		g.t.Fatal(err)
	}
	addr := freeAddr(g.t)
	n, err := New(context.Background(), Config{
		ID: "r" + strconv.Itoa(i), Listen: addr, Advertise: addr, Dir: g.t.TempDir(), TLS: tlsConfig,
		Store: store.Config{Key: storetest.Key}, Reads: reads,
	})
	if err != nil {
		g.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- n.Run(ctx) }()
	g.nodes = append(g.nodes, n)
	g.stop = append(g.stop, cancel)
	g.errs = append(g.errs, errc)
	g.t.Cleanup(func() { cancel(); n.Shutdown() })
}

// waitLeader waits until one of the live nodes, other than the excluded
// ones, decides, and returns its index.
func (g *group) waitLeader(exclude ...int) int {
	g.t.Helper()
	leader := -1
	eventually.Check(g.t, 10*time.Second, 10*time.Millisecond, "a working store", eventually.Holds(func() (bool, string) {
		for i, n := range g.nodes {
			if n.Deciding() && !contains(exclude, i) {
				leader = i
				return true, ""
			}
		}
		return false, "no replica decides"
	}))
	return leader
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func proxy(name string) store.ProxyInfo {
	return store.ProxyInfo{Key: store.ObjectName{Namespace: storetest.Namespace, Name: name}, UID: types.UID(name), Ready: true,
		URL: "http://127.0.0.1:3128/" + name, MaxLeases: 1}
}

// TestFailoverKeepsLeasesBansAndState: three replicas; the leader grants,
// a ban and session state are kept; the leader stops; another leads with
// the lease, the ban and the state, and grants at once.
func TestFailoverKeepsLeasesBansAndState(t *testing.T) {
	g := newGroup(t, 3)
	l0 := g.waitLeader()
	st := g.nodes[l0].Working()
	for i := range 3 {
		st.Upsert(proxy("p" + strconv.Itoa(i)))
	}
	held, err := st.Acquire(t.Context(), store.AcquireRequest{Holder: "w", Owner: "alice", Domain: "shop.example"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutStateAs("alice", held.ID, []byte("cookies")); err != nil {
		t.Fatal(err)
	}
	banned, err := st.Acquire(t.Context(), store.AcquireRequest{Holder: "w", Owner: "alice", Domain: "ban.example"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.ReleaseAs("alice", banned.ID, store.OutcomeBanned, "", store.Report{}); err != nil {
		t.Fatal(err)
	}

	stopped := time.Now()
	g.stop[l0]()
	if err := g.nodes[l0].Shutdown(); err != nil {
		t.Fatal(err)
	}
	l1 := g.waitLeader(l0)
	next := g.nodes[l1].Working()
	got, err := next.GetAs("alice", held.ID)
	if err != nil {
		t.Fatalf("the lease on the new leader: %v", err)
	}
	granted, err := next.Acquire(t.Context(), store.AcquireRequest{Holder: "w", Owner: "bob"})
	if err != nil {
		t.Fatalf("a grant on the new leader: %v", err)
	}
	t.Logf("first grant %v after the leader stopped", time.Since(stopped).Round(time.Millisecond))
	if granted.Proxy.Key == held.Proxy.Key {
		t.Errorf("the new leader granted %s, which alice holds", held.Proxy.Key)
	}
	// The ban: the banned proxy is not granted for the site again.
	if err := next.ReleaseAs("bob", granted.ID, store.OutcomeOK, "", store.Report{}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		l, err := next.Acquire(t.Context(), store.AcquireRequest{Holder: "w", Owner: "carol", Domain: "ban.example"})
		if err != nil {
			break
		}
		if l.Proxy.Key == banned.Proxy.Key {
			t.Errorf("the new leader granted %s for the site that banned it", banned.Proxy.Key)
		}
		defer next.ReleaseAs("carol", l.ID, store.OutcomeOK, "", store.Report{})
	}
	if got.ExpiresAt.Before(held.ExpiresAt) {
		t.Errorf("the lease now expires at %v, before %v", got.ExpiresAt, held.ExpiresAt)
	}
}

// TestFollowersForwardToTheLeader: a replica that does not lead runs each
// lease call on the leader, as the identity it vouches for, and the answers
// (errors included) are the store's own; when the leader goes, the calls
// go to the next one.
func TestFollowersForwardToTheLeader(t *testing.T) {
	g := newGroup(t, 3)
	l0 := g.waitLeader()
	for i := range 3 {
		g.nodes[l0].Working().Upsert(proxy("p" + strconv.Itoa(i)))
	}
	f1, f2 := g.nodes[(l0+1)%3].Router(), g.nodes[(l0+2)%3].Router()
	held, err := f1.Acquire(t.Context(), store.AcquireRequest{Holder: "w", Owner: "alice"})
	if err != nil {
		t.Fatalf("an acquire through a follower: %v", err)
	}
	if _, err := f2.RenewAs("alice", held.ID, 0, store.Report{OKRequests: 3}); err != nil {
		t.Fatalf("a renewal through the other follower: %v", err)
	}
	if _, err := f2.RenewAs("mallory", held.ID, 0, store.Report{}); !errors.Is(err, store.ErrUnknownLease) {
		t.Errorf("another identity's renewal: %v, want ErrUnknownLease", err)
	}
	if _, err := f1.Acquire(t.Context(), store.AcquireRequest{Holder: "w", Owner: "bob", TTL: time.Hour}); err == nil {
		t.Errorf("an out-of-bounds TTL went through")
	} else if field := new(store.FieldError); !errors.As(err, &field) || field.Field != "ttl" {
		t.Errorf("an out-of-bounds TTL: %v, want a FieldError naming ttl", err)
	}
	if got, err := f1.List(store.LeaseFilter{}); err != nil || len(got) != 1 {
		t.Errorf("List through a follower: %d leases, %v; want 1", len(got), err)
	}
	// The leader goes; a follower's acquire waits for the next one.
	g.stop[l0]()
	if err := g.nodes[l0].Shutdown(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	next, err := f1.Acquire(ctx, store.AcquireRequest{Holder: "w", Owner: "bob", Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("an acquire through a follower across the change of leader: %v", err)
	}
	if next.Proxy.Key == held.Proxy.Key {
		t.Errorf("the new leader granted %s, which alice holds", held.Proxy.Key)
	}
	if err := f2.ReleaseAs("alice", held.ID, store.OutcomeOK, "", store.Report{}); err != nil {
		t.Errorf("alice's release after the change: %v", err)
	}
}
