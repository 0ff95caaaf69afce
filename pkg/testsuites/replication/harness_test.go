package replication_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
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
// port on loopback and a Raft directory that outlives its process, as an
// emptyDir outlives a container.
type group struct {
	t        *testing.T
	ns       string
	kube     kubernetes.Interface
	crawl    versioned.Interface
	selector string
	replicas []*replicaProc
	flags    []string
}

type replicaProc struct {
	name, uid, peer, raftDir string
	proc                     *operatortest.Process
	api                      *client.Client
	// leaseAddr stays the same across restarts, so a client keeps its address.
	leaseAddr string
}

func newGroup(t *testing.T, n int, extra ...string) *group {
	t.Helper()
	env := shared.Get(t).Env
	g := &group{t: t, kube: kubernetes.NewForConfigOrDie(env.Config), crawl: versioned.NewForConfigOrDie(env.Config)}
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

// newReplica makes the replica's Pod object and picks its ports.
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
	return &replicaProc{name: name, uid: string(pod.UID), peer: "127.0.0.1:" + strconv.Itoa(ports[0]),
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
		Binary: shared.Get(g.t).Binary, Name: r.name, Args: args, LogsEnv: "REPLICATION_LOGS",
		Env: []string{"POD_NAME=" + r.name, "POD_NAMESPACE=" + g.ns, "POD_UID=" + r.uid},
	})
	api, err := client.New("http://" + r.leaseAddr)
	if err != nil {
		g.t.Fatal(err)
	}
	r.api = api
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

// fleet makes n External Proxies (maxLeases 1) on forward proxies of this
// process, health-checked through themselves against a local target, and
// waits until the leader offers them all.
func (g *group) fleet(n int) {
	g.t.Helper()
	target := proxytest.StartHTTPTarget(g.t)
	for i := range n {
		px := proxytest.StartInProcess(g.t, proxytest.Options{Verbosity: 1})
		_, port, _ := net.SplitHostPort(px.Addr)
		p, _ := strconv.Atoi(port)
		_, err := g.crawl.CrawlV1alpha1().Proxies(g.ns).Create(g.t.Context(), &crawlv1alpha1.Proxy{
			ObjectMeta: metav1.ObjectMeta{Name: "px-" + strconv.Itoa(i)},
			Spec: crawlv1alpha1.ProxySpec{
				Mode: crawlv1alpha1.ModeExternal, Endpoint: &crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: int32(p)}, MaxLeases: 1,
				HealthCheck: crawlv1alpha1.HealthCheck{URL: target.URL + "/generate_204", ExpectedStatus: http.StatusNoContent,
					Interval: &metav1.Duration{Duration: time.Second}, Timeout: &metav1.Duration{Duration: 500 * time.Millisecond}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			g.t.Fatal(err)
		}
	}
	eventually.Check(g.t, startTimeout, pollInterval, "every proxy offered", func(ctx context.Context) error {
		proxies, err := g.leader(startTimeout).api.Proxies(ctx, g.ns, "")
		if err != nil {
			return err
		}
		if len(proxies) != n {
			return fmt.Errorf("%d Ready proxies offered, want %d", len(proxies), n)
		}
		return nil
	})
}
