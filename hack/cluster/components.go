package main

import (
	"fmt"
	"path/filepath"
	"strings"
)

// component is one process of the node: its binary, arguments and the files
// it reads, all derived from the node by a pure function.
type component struct {
	Name  string
	Bin   string
	Args  []string
	Files map[string]string // path → content, written before the start
	Env   []string          // added to the environment
}

// components in start order: each needs the ones before it.
func (n node) components() []component {
	return []component{n.etcd(), n.apiserver(), n.containerd(), n.controllerManager(), n.scheduler(), n.kubelet(), n.kubeProxy(), n.kubeRouter()}
}

func (n node) etcd() component {
	return component{Name: "etcd", Bin: n.bin("etcd"), Args: []string{
		"--data-dir=" + n.path("etcd"),
		"--listen-client-urls=http://" + netJoin("127.0.0.1", n.EtcdPort),
		"--advertise-client-urls=http://" + netJoin("127.0.0.1", n.EtcdPort),
		"--listen-peer-urls=http://" + netJoin("127.0.0.1", n.EtcdPeerPort),
		"--initial-advertise-peer-urls=http://" + netJoin("127.0.0.1", n.EtcdPeerPort),
		"--initial-cluster=default=http://" + netJoin("127.0.0.1", n.EtcdPeerPort),
		"--listen-metrics-urls=",
	}}
}

func (n node) apiserver() component {
	return component{Name: "kube-apiserver", Bin: n.bin("kube-apiserver"), Args: []string{
		"--etcd-servers=http://" + netJoin("127.0.0.1", n.EtcdPort),
		"--bind-address=" + n.IP.String(),
		"--advertise-address=" + n.IP.String(),
		fmt.Sprintf("--secure-port=%d", n.APIPort),
		"--cert-dir=" + n.path("apiserver-certs"),
		"--tls-cert-file=" + n.pki("apiserver.crt"),
		"--tls-private-key-file=" + n.pki("apiserver.key"),
		"--client-ca-file=" + n.pki("ca.crt"),
		"--kubelet-client-certificate=" + n.pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + n.pki("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority=" + n.pki("ca.crt"),
		// kubectl logs and exec reach the kubelet at the node's address.
		"--kubelet-preferred-address-types=InternalIP",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + n.pki("sa.pub"),
		"--service-account-signing-key-file=" + n.pki("sa.key"),
		"--service-cluster-ip-range=" + n.ServiceCIDR.String(),
		"--allow-privileged=true",
		"--profiling=false",
	}}
}

func (n node) controllerManager() component {
	return component{Name: "kube-controller-manager", Bin: n.bin("kube-controller-manager"), Args: append(n.clientArgs("kube-controller-manager"),
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+n.pki("sa.key"),
		// Published in every namespace as kube-root-ca.crt, which Pods mount.
		"--root-ca-file="+n.pki("ca.crt"),
		"--cluster-signing-cert-file="+n.pki("ca.crt"),
		"--cluster-signing-key-file="+n.pki("ca.key"),
		"--allocate-node-cidrs=true",
		"--cluster-cidr="+n.ClusterCIDR.String(),
		fmt.Sprintf("--node-cidr-mask-size=%d", n.PodCIDR.Bits()),
		"--service-cluster-ip-range="+n.ServiceCIDR.String(),
		"--profiling=false",
	)}
}

func (n node) scheduler() component {
	return component{Name: "kube-scheduler", Bin: n.bin("kube-scheduler"), Args: append(n.clientArgs("kube-scheduler"),
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--profiling=false",
	)}
}

// clientArgs: a control-plane component reaches the API server, and checks
// the callers of its own health endpoint, with its identity's kubeconfig.
func (n node) clientArgs(user string) []string {
	kc := n.kubeconfig(user)
	return []string{"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc}
}

// kubelet reads its drop-in folder after its config: the eviction
// thresholds live there, so that a test (the realnode suite's memory-pressure
// step) can override them with a later file and a restart.
func (n node) kubelet() component {
	config := n.path("kubelet", "config.yaml")
	eviction := n.path("kubelet", "config.d", "10-eviction.conf")
	return component{Name: "kubelet", Bin: n.bin("kubelet"), Args: []string{
		"--config=" + config,
		"--config-dir=" + filepath.Dir(eviction),
		"--kubeconfig=" + n.kubeconfig("kubelet"),
		"--root-dir=" + n.path("kubelet", "root"),
		"--cert-dir=" + n.path("kubelet", "pki"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.IP.String(),
	}, Files: map[string]string{config: n.kubeletConfig(), eviction: kubeletEviction}}
}

// kubeletEviction is the node's eviction drop-in (see kubelet).
const kubeletEviction = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
evictionHard: {memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%}
`

// kubeletConfig: the settings testenv-notes.md ("A real node") found necessary
// on cgroup v1 without systemd, and nothing the node does not need.
func (n node) kubeletConfig() string {
	return strings.Join([]string{
		"apiVersion: kubelet.config.k8s.io/v1beta1",
		"kind: KubeletConfiguration",
		"failCgroupV1: false",
		"cgroupDriver: cgroupfs",
		"failSwapOn: false",
		"containerRuntimeEndpoint: unix://" + n.containerdSocket(),
		"address: " + n.IP.String(),
		"healthzBindAddress: 127.0.0.1",
		"readOnlyPort: 0",
		"tlsCertFile: " + n.pki("kubelet-serving.crt"),
		"tlsPrivateKeyFile: " + n.pki("kubelet-serving.key"),
		"authentication:",
		"  anonymous: {enabled: false}",
		"  webhook: {enabled: true}",
		"  x509: {clientCAFile: " + n.pki("ca.crt") + "}",
		"authorization: {mode: Webhook}",
		"serializeImagePulls: false",
		// The node's CoreDNS (addons.go) answers at this Service address.
		"clusterDNS: [" + n.dnsIP().String() + "]",
		"clusterDomain: " + clusterDomain,
		// Images are imported, never pulled: keep them however full the disk is.
		"imageGCHighThresholdPercent: 100",
		"",
	}, "\n")
}

func (n node) kubeProxy() component {
	config := n.path("kube-proxy", "config.yaml")
	return component{Name: "kube-proxy", Bin: n.bin("kube-proxy"), Args: []string{"--config=" + config},
		Files: map[string]string{config: n.kubeProxyConfig()}}
}

// kubeProxyConfig leaves the host's conntrack and localnet sysctls alone (zero
// values), so that down has nothing of the machine's to restore.
func (n node) kubeProxyConfig() string {
	return strings.Join([]string{
		"apiVersion: kubeproxy.config.k8s.io/v1alpha1",
		"kind: KubeProxyConfiguration",
		"mode: iptables",
		"clientConnection: {kubeconfig: " + n.kubeconfig("kube-proxy") + "}",
		"hostnameOverride: " + n.Name,
		"clusterCIDR: " + n.ClusterCIDR.String(),
		"bindAddress: " + n.IP.String(),
		"healthzBindAddress: 127.0.0.1:10256",
		"metricsBindAddress: 127.0.0.1:10249",
		"iptables: {localhostNodePorts: false}",
		"conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}",
		"",
	}, "\n")
}

// kubeRouter enforces NetworkPolicies: kube-router with its network policy
// controller alone (no routing, no service proxy, no CNI of its own), in the
// filter table's INPUT, FORWARD and OUTPUT chains with ipsets from Debian's
// ipset (docs/decisions/0280-kube-router-enforces-network-policy.md).
func (n node) kubeRouter() component {
	return component{Name: "kube-router", Bin: n.bin("kube-router"), Args: []string{
		"--kubeconfig=" + n.kubeconfig("kube-router"),
		"--hostname-override=" + n.Name,
		"--run-firewall=true",
		"--run-router=false",
		"--run-service-proxy=false",
		"--enable-cni=false",
		"--enable-ipv6=false",
		"--service-cluster-ip-range=" + n.ServiceCIDR.String(),
		"--health-addr=127.0.0.1",
		fmt.Sprintf("--health-port=%d", kubeRouterHealthPort),
		"--metrics-port=0",
	}}
}

const kubeRouterHealthPort = 20244
