package operatortest

import (
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// APIPartition gives one operator a way to the API server of its own: a
// loopback port that the nat table redirects to the API server's. Cut drops
// the packets sent to that port (by the original destination conntrack
// remembers) and nobody else's, as a network partition between that
// operator and the API server would: its established connections stall
// rather than close. Record 0189-partitions-filter-own-port.md.
type APIPartition struct {
	t     *testing.T
	port  int
	chain string
	// Kubeconfig is an admin kubeconfig that dials the API server through
	// the partitionable port.
	Kubeconfig string
}

// NewAPIPartition installs the redirect, in a chain of its own in the nat
// and the filter tables, and removes both when the test ends, however it
// ends. It needs root and iptables (`make deps`).
func NewAPIPartition(t *testing.T, env *testenv.Environment) *APIPartition {
	t.Helper()
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Fatal("iptables is missing: run `make deps` (partition tests filter real packets, as root)")
	}
	api, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	p := &APIPartition{t: t, port: FreePorts(t, 1)[0]}
	p.chain = fmt.Sprintf("PO-TEST-PART-%d", p.port)
	t.Cleanup(p.remove)
	port := fmt.Sprint(p.port)
	p.iptables("nat", "-N", p.chain)
	p.iptables("nat", "-A", p.chain, "-d", "127.0.0.1", "-p", "tcp", "--dport", port, "-j", "REDIRECT", "--to-ports", api.Port())
	p.iptables("nat", "-I", "OUTPUT", "1", "-j", p.chain)
	p.iptables("filter", "-N", p.chain)
	p.iptables("filter", "-I", "OUTPUT", "1", "-j", p.chain)

	p.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfigVia(p.Kubeconfig, "https://127.0.0.1:"+port); err != nil {
		t.Fatal(err)
	}
	return p
}

// Cut drops every packet sent to the partitionable port.
func (p *APIPartition) Cut() {
	p.t.Helper()
	p.iptables("filter", "-A", p.chain, "-p", "tcp", "-m", "conntrack", "--ctorigdstport", fmt.Sprint(p.port), "-j", "DROP")
}

// Heal lets the packets through again.
func (p *APIPartition) Heal() {
	p.t.Helper()
	p.iptables("filter", "-F", p.chain)
}

func (p *APIPartition) iptables(table string, args ...string) {
	p.t.Helper()
	args = append([]string{"-w", "-t", table}, args...)
	if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
		p.t.Fatalf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// remove deletes both chains and checks that nothing of them is left.
func (p *APIPartition) remove() {
	for _, table := range []string{"filter", "nat"} {
		for _, args := range [][]string{{"-D", "OUTPUT", "-j", p.chain}, {"-F", p.chain}, {"-X", p.chain}} {
			_ = exec.Command("iptables", append([]string{"-w", "-t", table}, args...)...).Run()
		}
		if out, _ := exec.Command("iptables", "-w", "-t", table, "-S").Output(); strings.Contains(string(out), p.chain) {
			p.t.Errorf("the partition's rules are still in the %s table:\n%s", table, out)
		}
	}
}

// PeerPartition cuts one operator replica from its peers: each replica's
// peer port listens on a loopback address of its own, from which it also
// dials its peers (pkg/lease/replica), and Cut drops every packet from or
// to that address on the peer ports, in a filter-table chain of its own
// (`PO-TEST-RAFT-<port>`). The replica's lease API and its connection to
// the API server, on 127.0.0.1, are not touched. Established connections
// stall, as in a real partition. Record 0189-partitions-filter-own-port.md.
type PeerPartition struct {
	t     *testing.T
	chain string
	ip    string
	ports string
}

// NewPeerPartition installs the (empty) chain for the replica whose peer
// port is on ip, among peer ports ports, and removes it when the test ends,
// however it ends. It needs root and iptables (`make deps`).
func NewPeerPartition(t *testing.T, ip string, ownPort int, ports []int) *PeerPartition {
	t.Helper()
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Fatal("iptables is missing: run `make deps` (partition tests filter real packets, as root)")
	}
	var ps []string
	for _, p := range ports {
		ps = append(ps, fmt.Sprint(p))
	}
	p := &PeerPartition{t: t, chain: fmt.Sprintf("PO-TEST-RAFT-%d", ownPort), ip: ip, ports: strings.Join(ps, ",")}
	t.Cleanup(p.remove)
	p.iptables("-N", p.chain)
	p.iptables("-I", "OUTPUT", "1", "-j", p.chain)
	return p
}

// Cut drops the replica's packets to and from its peers.
func (p *PeerPartition) Cut() {
	p.t.Helper()
	for _, dir := range []string{"-s", "-d"} {
		p.iptables("-A", p.chain, dir, p.ip, "-p", "tcp", "-m", "multiport", "--ports", p.ports, "-j", "DROP")
	}
}

// Heal lets them through again.
func (p *PeerPartition) Heal() {
	p.t.Helper()
	p.iptables("-F", p.chain)
}

func (p *PeerPartition) iptables(args ...string) {
	p.t.Helper()
	args = append([]string{"-w", "-t", "filter"}, args...)
	if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
		p.t.Fatalf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// remove deletes the chain and checks that nothing of it is left.
func (p *PeerPartition) remove() {
	for _, args := range [][]string{{"-D", "OUTPUT", "-j", p.chain}, {"-F", p.chain}, {"-X", p.chain}} {
		_ = exec.Command("iptables", append([]string{"-w", "-t", "filter"}, args...)...).Run()
	}
	if out, _ := exec.Command("iptables", "-w", "-t", "filter", "-S").Output(); strings.Contains(string(out), p.chain) {
		p.t.Errorf("the peer partition's rules are still in the filter table:\n%s", out)
	}
}
