// Command cluster is make cluster and make cluster-down: a real one-node
// Kubernetes built by the project (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet, kube-proxy, containerd with Debian's runc, the
// reference CNI plugins, kube-router enforcing NetworkPolicies, and CoreDNS
// as a Deployment for cluster DNS), with the images of make image imported
// into containerd. No registry and nothing prebuilt: see docs/operations.md.
//
//	cluster up      start the node in the background; ready when the Node is Ready
//	cluster down    stop it and remove everything it put on the machine
//	cluster status  print the node's components and whether they run
//	cluster restart NAME  stop one component and start it again (the fault
//	                suites restart the kubelet and containerd under a running node)
//
// All state lives under --dir (.cluster); the admin kubeconfig is
// .cluster/kubeconfig.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	n := node{
		Name:         "proxy-operator-node",
		APIPort:      6443,
		EtcdPort:     2479,
		EtcdPeerPort: 2480,
		Bridge:       "po-cni0",
		PodCIDR:      netip.MustParsePrefix("10.244.0.0/24"),
		ClusterCIDR:  netip.MustParsePrefix("10.244.0.0/16"),
		ServiceCIDR:  netip.MustParsePrefix("10.96.0.0/16"),
	}
	flag.StringVar(&n.Dir, "dir", ".cluster", "the node's folder: state, logs, pids and the kubeconfig")
	flag.StringVar(&n.BinDir, "bin", "bin", "where make cluster-tools put the binaries")
	nodeIP := flag.String("node-ip", "", "the node's address (default: the address of the default route's interface)")
	images := flag.String("images", ".local/cluster-images", "OCI layouts to import into containerd (make cluster writes them)")
	flag.StringVar(&n.Runc, "runc", "runc", "the OCI runtime (Debian's runc)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: cluster [flags] up|down|status|restart NAME")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 || (flag.Arg(0) == "restart") != (flag.NArg() == 2) {
		flag.Usage()
		os.Exit(2)
	}
	if err := complete(&n, *nodeIP); err != nil {
		fail(err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var err error
	switch flag.Arg(0) {
	case "up":
		err = up(ctx, n, *images)
	case "down":
		err = down(ctx, n)
		if err == nil {
			fmt.Println("cluster: down; nothing left behind")
		}
	case "status":
		err = status(n)
	case "restart":
		err = restart(ctx, n, flag.Arg(1))
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fail(err)
	}
}

// complete fills in what comes from the machine: absolute paths, the node's
// address, runc's path and the image tag.
func complete(n *node, nodeIP string) error {
	var err error
	if n.Dir, err = filepath.Abs(n.Dir); err != nil {
		return err
	}
	if n.BinDir, err = filepath.Abs(n.BinDir); err != nil {
		return err
	}
	if nodeIP == "" {
		if n.IP, err = defaultRouteAddr(); err != nil {
			return fmt.Errorf("--node-ip not given and %w", err)
		}
	} else if n.IP, err = netip.ParseAddr(nodeIP); err != nil {
		return fmt.Errorf("--node-ip: %w", err)
	}
	if path, err := exec.LookPath(n.Runc); err == nil {
		n.Runc = path
	}
	version, err := os.ReadFile(filepath.Join(filepath.Dir(n.BinDir), "VERSION"))
	if err != nil {
		return fmt.Errorf("the image tag: %w", err)
	}
	n.Version = strings.TrimSpace(string(version))
	return nil
}

// defaultRouteAddr is the IPv4 address of the interface the default route
// leaves by: Pods reach the API server there, which loopback cannot give them.
func defaultRouteAddr() (netip.Addr, error) {
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return netip.Addr{}, err
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 2 || f[1] != "00000000" {
			continue
		}
		iface, err := net.InterfaceByName(f[0])
		if err != nil {
			return netip.Addr{}, err
		}
		addrs, err := iface.Addrs()
		if err != nil {
			return netip.Addr{}, err
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
				return p.Addr(), nil
			}
		}
	}
	return netip.Addr{}, errors.New("no default route with an IPv4 address")
}

func status(n node) error {
	for _, c := range n.components() {
		if pid, ok := running(n, c.Name, c.Bin); ok {
			fmt.Printf("%-24s running (pid %d), log %s\n", c.Name, pid, n.logFile(c.Name))
		} else {
			fmt.Printf("%-24s not running\n", c.Name)
		}
	}
	return nil
}

// restart stops one component (SIGTERM, as a service manager would) and
// starts it again with the same configuration, waiting for its health.
func restart(ctx context.Context, n node, name string) error {
	for _, c := range n.components() {
		if c.Name != name {
			continue
		}
		if err := stop(n, c.Name, c.Bin, 10*time.Second); err != nil {
			return err
		}
		if err := start(n, c); err != nil {
			return err
		}
		if err := waitStarted(ctx, n, c); err != nil {
			return fmt.Errorf("%s did not start again: %w\n%s", name, err, tail(n, name, 25))
		}
		fmt.Println("cluster: restarted", name)
		return nil
	}
	return fmt.Errorf("no component %q", name)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cluster:", err)
	os.Exit(1)
}
