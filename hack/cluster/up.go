package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// up starts the node and returns once the Node is Ready, the images are
// imported and the default ServiceAccount exists. On failure it tears down
// what it started and returns the failing component's log tail.
func up(ctx context.Context, n node, images string) (err error) {
	if client, err := adminClient(n); err == nil && nodeReady(ctx, client, n.Name) == nil {
		// Up already: bring the images and addons up to date, as make cluster
		// just rebuilt them.
		fmt.Println("cluster: already up; kubeconfig:", n.AdminKubeconfig())
		if err := importImages(ctx, n, images); err != nil {
			return err
		}
		return applyAddons(ctx, n)
	}
	if err := preflight(n, images); err != nil {
		return err
	}
	// A half-started node from an interrupted run is cleared first.
	if err := down(ctx, n); err != nil {
		return fmt.Errorf("clearing a previous node: %w", err)
	}
	defer func() {
		if err != nil {
			if derr := down(context.Background(), n); derr != nil {
				err = errors.Join(err, fmt.Errorf("tearing down after the failure: %w", derr))
			}
		}
	}()
	if err := prepareHost(n); err != nil {
		return err
	}
	if err := writePKI(n); err != nil {
		return err
	}
	began := time.Now()
	for _, c := range n.components() {
		if err := start(n, c); err != nil {
			return err
		}
		if err := waitStarted(ctx, n, c); err != nil {
			return fmt.Errorf("%s did not start: %w\n--- %s\n%s", c.Name, err, n.logFile(c.Name), tail(n, c.Name, 25))
		}
		switch c.Name {
		case "kube-apiserver":
			// Before kube-router starts: it needs its ClusterRole.
			if err := applyAddons(ctx, n); err != nil {
				return err
			}
		case "containerd":
			if err := importImages(ctx, n, images); err != nil {
				return err
			}
		}
	}
	client, err := adminClient(n)
	if err != nil {
		return err
	}
	if err := poll(ctx, 2*time.Minute, func() error { return nodeReady(ctx, client, n.Name) }); err != nil {
		return fmt.Errorf("node %s not Ready: %w\n--- kubelet\n%s", n.Name, err, tail(n, "kubelet", 25))
	}
	// The first Pods right after a start race the ServiceAccount controller.
	if err := poll(ctx, time.Minute, func() error {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("default ServiceAccount: %w\n--- kube-controller-manager\n%s", err, tail(n, "kube-controller-manager", 25))
	}
	if err := dnsReady(ctx, client); err != nil {
		return fmt.Errorf("cluster DNS: %w\n--- kubelet\n%s", err, tail(n, "kubelet", 25))
	}
	fmt.Printf("cluster: node %s Ready in %.1fs; export KUBECONFIG=%s\n", n.Name, time.Since(began).Seconds(), n.AdminKubeconfig())
	return nil
}

// preflight names what is missing and what installs it.
func preflight(n node, images string) error {
	if os.Geteuid() != 0 {
		return errors.New("make cluster runs as root: the node mounts, creates network interfaces and iptables rules")
	}
	var missing []error
	for _, c := range n.components() {
		if _, err := os.Stat(c.Bin); err != nil {
			missing = append(missing, fmt.Errorf("%s (make cluster-tools builds it)", c.Bin))
		}
	}
	for _, b := range []string{"containerd-shim-runc-v2", "ctr", "cni/bridge", "cni/host-local", "cni/loopback", "cni/portmap", "kubectl"} {
		if _, err := os.Stat(n.bin(b)); err != nil {
			missing = append(missing, fmt.Errorf("%s (make cluster-tools builds it)", n.bin(b)))
		}
	}
	// The sandbox and the cluster DNS: without them no Pod, or no name, works.
	for _, img := range []string{"pause", "coredns"} {
		if _, err := os.Stat(filepath.Join(images, img)); err != nil {
			missing = append(missing, fmt.Errorf("image layout %s (make cluster-images builds it)", filepath.Join(images, img)))
		}
	}
	for _, b := range []string{n.Runc, "iptables", "ipset", "skopeo"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, fmt.Errorf("%s (make deps installs it)", b))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing: %w", errors.Join(missing...))
	}
	return nil
}

// waitStarted waits for the component's own health signal.
func waitStarted(ctx context.Context, n node, c component) error {
	insecure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		// Loopback health endpoints with the components' self-signed certificates.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
	}}
	var check func() error
	switch c.Name {
	case "etcd":
		check = httpOK(insecure, fmt.Sprintf("http://127.0.0.1:%d/health", n.EtcdPort))
	case "kube-apiserver":
		check = func() error {
			client, err := adminClient(n)
			if err != nil {
				return err
			}
			_, err = client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err
		}
	case "containerd":
		check = func() error {
			return exec.CommandContext(ctx, n.bin("ctr"), "--address", n.containerdSocket(), "version").Run()
		}
	case "kube-controller-manager":
		check = httpOK(insecure, "https://127.0.0.1:10257/healthz")
	case "kube-scheduler":
		check = httpOK(insecure, "https://127.0.0.1:10259/healthz")
	case "kubelet":
		check = httpOK(insecure, "http://127.0.0.1:10248/healthz")
	case "kube-proxy":
		check = httpOK(insecure, "http://127.0.0.1:10256/healthz")
	case "kube-router":
		check = httpOK(insecure, fmt.Sprintf("http://127.0.0.1:%d/healthz", kubeRouterHealthPort))
	default:
		return fmt.Errorf("no health check for %s", c.Name)
	}
	return poll(ctx, time.Minute, func() error {
		if _, ok := running(n, c.Name, c.Bin); !ok {
			return errExited
		}
		return check()
	})
}

var errExited = errors.New("exited")

func httpOK(client *http.Client, url string) func() error {
	return func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}
}

// poll calls f until it succeeds, the process it checks has exited, or timeout.
func poll(ctx context.Context, timeout time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := f()
		if err == nil || errors.Is(err, errExited) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %s: %w", timeout, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func adminClient(n node) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", n.AdminKubeconfig())
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	return kubernetes.NewForConfig(cfg)
}

func nodeReady(ctx context.Context, client kubernetes.Interface, name string) error {
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("Ready=%s: %s", c.Status, c.Message)
		}
	}
	return errors.New("no Ready condition yet")
}

// importImages loads every OCI layout under dir (make image's output) into
// containerd's Kubernetes namespace under its ghcr.io/proxyfleet name. skopeo
// converts each to a docker-archive, which ctr imports and unpacks.
func importImages(ctx context.Context, n node, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("images: %w (make image --images=... writes them; make cluster runs it)", err)
	}
	tmp, err := os.MkdirTemp(n.Dir, "import-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, e := range entries {
		ref := "ghcr.io/proxyfleet/" + e.Name() + ":" + n.Version
		archive := filepath.Join(tmp, e.Name()+".tar")
		if out, err := exec.CommandContext(ctx, "skopeo", "copy", "--quiet",
			"oci:"+filepath.Join(dir, e.Name())+":"+n.Version, "docker-archive:"+archive+":"+ref).CombinedOutput(); err != nil {
			return fmt.Errorf("skopeo copy %s: %w\n%s", e.Name(), err, out)
		}
		if out, err := exec.CommandContext(ctx, n.bin("ctr"), "--address", n.containerdSocket(),
			"-n", "k8s.io", "images", "import", archive).CombinedOutput(); err != nil {
			return fmt.Errorf("ctr images import %s: %w\n%s", ref, err, out)
		}
		fmt.Println("cluster: imported", ref)
	}
	return nil
}
