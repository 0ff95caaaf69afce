package main

import (
	"net/netip"
	"path/filepath"
)

// node is everything the components' configuration is derived from: where the
// node keeps its state, where the binaries are, and its addresses.
type node struct {
	Dir    string // .cluster: all state, logs and pids; removed by down
	BinDir string // bin/: the pinned builds
	Name   string // the Node object's name
	Runc   string // the OCI runtime containerd's shim runs (Debian's runc)
	// Version tags the imported images (the VERSION file, as make image tags them).
	Version string
	IP      netip.Addr // the node's address: the API server, kubelet and Services answer there
	// Ports on IP (API server) and on loopback (etcd).
	APIPort, EtcdPort, EtcdPeerPort int
	// Not used elsewhere on the machine: the bridge and the Pod and Service ranges.
	Bridge      string
	PodCIDR     netip.Prefix // the node's Pods (host-local hands these out)
	ClusterCIDR netip.Prefix // all Pods (controller-manager allocates PodCIDR from it)
	ServiceCIDR netip.Prefix
}

func (n node) path(elem ...string) string { return filepath.Join(append([]string{n.Dir}, elem...)...) }

func (n node) pki(file string) string        { return n.path("pki", file) }
func (n node) kubeconfig(user string) string { return n.path("kubeconfigs", user+".kubeconfig") }
func (n node) logFile(name string) string    { return n.path("logs", name+".log") }
func (n node) pidFile(name string) string    { return n.path("pids", name+".pid") }
func (n node) bin(name string) string        { return filepath.Join(n.BinDir, name) }

// AdminKubeconfig is the documented path users and the e2e suite read.
func (n node) AdminKubeconfig() string { return n.path("kubeconfig") }

func (n node) containerdSocket() string { return n.path("containerd", "containerd.sock") }

// serviceIP is the kubernetes Service's ClusterIP: the first address of the range.
func (n node) serviceIP() netip.Addr { return n.ServiceCIDR.Addr().Next() }

// dnsIP is the cluster DNS Service's ClusterIP (the tenth address, as
// kubeadm chooses), which the kubelet writes into every Pod's resolv.conf.
func (n node) dnsIP() netip.Addr {
	a := n.ServiceCIDR.Addr()
	for range 10 {
		a = a.Next()
	}
	return a
}

// clusterDomain is the DNS suffix of Services (<svc>.<namespace>.svc.<domain>).
const clusterDomain = "cluster.local"

// Hard-coded by the kubelet and CNI: down removes them only if up created them.
var hostPaths = []string{
	"/var/lib/kubelet",
	"/var/log/containers",
	"/var/log/pods",
	"/var/run/netns",
	"/var/lib/cni",
	"/run/containerd",
	"/etc/cni",
}
