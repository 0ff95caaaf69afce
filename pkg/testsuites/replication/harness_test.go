package replication_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// shared is cmd/proxy-operator, built once for the package, and the real
// API server its replicas share.
var shared = operatortest.NewShared()

func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }

const (
	pollInterval = 20 * time.Millisecond
	startTimeout = 2 * time.Minute
)

// group is a namespace and the operator replicas of one test, each with a
// Pod object of its own (there is no kubelet: the test plays it), a peer
// port on a loopback address of its own (127.0.0.10+i, which its peer
// dials come from too, so that a filter on it cuts it off) and a Raft
// directory that outlives its process, as an emptyDir outlives a
// container.
type group struct {
	t        *testing.T
	ns       string
	kube     kubernetes.Interface
	crawl    versioned.Interface
	selector string
	replicas []*replicaProc
	flags    []string
	// binary is cmd/proxy-operator as the package built it, or another
	// build (newGroupOf).
	binary string
	// made counts the replicas made, for each one's own peer address.
	made int
}

type replicaProc struct {
	name, uid, peer, raftDir string
	// ip is the peer port's address, peerPort its port.
	ip       string
	peerPort int
	proc     *operatortest.Process
	api      *client.Client
	// leaseAddr stays the same across restarts, so a client keeps its address.
	leaseAddr string
}

func newGroup(t *testing.T, n int, extra ...string) *group {
	t.Helper()
	return newGroupOf(t, shared.Get(t).Binary, n, extra...)
}

// newGroupOf is newGroup with another build of cmd/proxy-operator.
func newGroupOf(t *testing.T, binary string, n int, extra ...string) *group {
	t.Helper()
	env := shared.Get(t).Env
	g := &group{t: t, kube: kubernetes.NewForConfigOrDie(env.Config), crawl: versioned.NewForConfigOrDie(env.Config), binary: binary}
	g.ns = operatortest.NewNamespace(t, g.kube)
	g.selector = "replicas-of=" + g.ns
	g.flags = append([]string{
		"--lease-replication=raft", "--lease-auth=none", "--replica-selector=" + g.selector,
		"--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=500ms",
		"--lease-min-ttl=1s", "--lease-default-ttl=5s", "--lease-max-ttl=10s",
	}, extra...)
	for i := range n {
		g.replicas = append(g.replicas, g.newReplica("replica-"+strconv.Itoa(i)))
	}
	for _, r := range g.replicas {
		g.start(r)
	}
	return g
}

// newReplica makes the replica's Pod object and picks its ports, and
// its peer address: the next of 127.0.0.10, .11, ...
func (g *group) newReplica(name string) *replicaProc {
	g.t.Helper()
	pod, err := g.kube.CoreV1().Pods(g.ns).Create(g.t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"replicas-of": g.ns}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: "proxy-operator:test"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		g.t.Fatal(err)
	}
	ports := operatortest.FreePorts(g.t, 2)
	ip := "127.0.0." + strconv.Itoa(10+g.made)
	g.made++
	return &replicaProc{name: name, uid: string(pod.UID), ip: ip, peerPort: ports[0], peer: net.JoinHostPort(ip, strconv.Itoa(ports[0])),
		leaseAddr: "127.0.0.1:" + strconv.Itoa(ports[1]), raftDir: filepath.Join(g.t.TempDir(), "raft")}
}

// start runs (or runs again) the replica's process.
func (g *group) start(r *replicaProc) {
	g.t.Helper()
	kubeconfig := filepath.Join(g.t.TempDir(), "kubeconfig")
	if err := shared.Get(g.t).Env.WriteKubeconfig(kubeconfig); err != nil {
		g.t.Fatal(err)
	}
	args := append(operatortest.NamespaceArgs(kubeconfig, g.ns), g.flags...)
	args = append(args, "--peer-addr="+r.peer, "--peer-advertise="+r.peer, "--raft-dir="+r.raftDir, "--lease-addr="+r.leaseAddr)
	r.proc = operatortest.Start(g.t, operatortest.ProcessOptions{
		Binary: g.binary, Name: r.name, Args: args, LogsEnv: "REPLICATION_LOGS",
		Env: []string{"POD_NAME=" + r.name, "POD_NAMESPACE=" + g.ns, "POD_UID=" + r.uid},
	})
	if r.api == nil {
		// Once: the address outlives the process, and workers read it
		// while the process restarts.
		api, err := client.New("http://" + r.leaseAddr)
		if err != nil {
			g.t.Fatal(err)
		}
		r.api = api
	}
}

// leader waits until exactly one running replica decides, and returns it.
func (g *group) leader(timeout time.Duration) *replicaProc {
	g.t.Helper()
	var found *replicaProc
	eventually.Check(g.t, timeout, pollInterval, "one replica leading the lease store", func(ctx context.Context) error {
		found = nil
		for _, r := range g.replicas {
			if !r.proc.Running() {
				continue
			}
			scraped, err := r.proc.Scrape(ctx)
			if err != nil {
				continue
			}
			if v, _ := scraped.Value("proxy_operator_lease_store_raft_leader", nil); v == 1 {
				if found != nil {
					return fmt.Errorf("%s and %s both lead", found.name, r.name)
				}
				found = r
			}
		}
		if found == nil {
			return fmt.Errorf("no replica leads")
		}
		return nil
	})
	return found
}

// voters waits until every replica votes in the group, as the leader sees it.
func (g *group) voters(timeout time.Duration) {
	g.t.Helper()
	eventually.Check(g.t, timeout, pollInterval, "every replica a voter", func(ctx context.Context) error {
		l := g.leader(timeout)
		scraped, err := l.proc.Scrape(ctx)
		if err != nil {
			return err
		}
		if v, _ := scraped.Value("proxy_operator_lease_store_raft_members", map[string]string{"suffrage": "voter"}); int(v) != len(g.replicas) {
			return fmt.Errorf("%v voters, want %d", v, len(g.replicas))
		}
		return nil
	})
}

// fleet makes n exclusive proxies (maxLeases 1), as steadyFleet does.
func (g *group) fleet(n int) {
	g.t.Helper()
	g.steadyFleet(slices.Repeat([]int32{1}, n))
}
