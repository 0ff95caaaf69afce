package chaos_test

import (
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// partitionChain holds the suite's packet filters, in the nat and the filter
// tables. Only one test uses it at a time (the suite has no t.Parallel).
const partitionChain = "PO-CHAOS-PARTITION"

// apiPartition gives one operator a way to the API server of its own: a
// loopback port that the nat table redirects to the API server's. Cutting it
// drops that operator's packets (by the port it dialed, which conntrack
// remembers) and nobody else's, as a network partition between it and the
// API server would; its established connections stall rather than close.
type apiPartition struct {
	t        *testing.T
	viaPort  int
	apiPort  string
	kubeconf string
}

// newAPIPartition installs the redirect, and removes both chains when the
// test ends, however it ends. It needs root and iptables (`make deps`).
func newAPIPartition(t *testing.T) *apiPartition {
	t.Helper()
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Fatal("iptables is missing: run `make deps` (the partition tests filter real packets, as root)")
	}
	env := shared.Get(t).Env
	api, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	p := &apiPartition{t: t, viaPort: operatortest.FreePorts(t, 1)[0], apiPort: api.Port()}
	t.Cleanup(p.remove)
	via := fmt.Sprint(p.viaPort)
	p.iptables("nat", "-N", partitionChain)
	p.iptables("nat", "-A", partitionChain, "-d", "127.0.0.1", "-p", "tcp", "--dport", via, "-j", "REDIRECT", "--to-ports", p.apiPort)
	p.iptables("nat", "-I", "OUTPUT", "1", "-j", partitionChain)
	p.iptables("filter", "-N", partitionChain)
	p.iptables("filter", "-I", "OUTPUT", "1", "-j", partitionChain)

	p.kubeconf = filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfigVia(p.kubeconf, fmt.Sprintf("https://127.0.0.1:%d", p.viaPort)); err != nil {
		t.Fatal(err)
	}
	return p
}

// startOperator runs the operator like the suite's startOperator, on the
// partitionable port.
func (p *apiPartition) startOperator(name, ns string, extra ...string) *operatortest.Process {
	p.t.Helper()
	args := append(operatortest.NamespaceArgs(p.kubeconf, ns), "--lease-auth=none")
	return operatortest.Start(p.t, operatortest.ProcessOptions{
		Binary: shared.Get(p.t).Binary, Name: name, Args: append(args, extra...), LogsEnv: "CHAOS_LOGS",
	})
}

// cut drops every packet sent to the partitionable port.
func (p *apiPartition) cut() {
	p.t.Helper()
	p.iptables("filter", "-A", partitionChain, "-p", "tcp", "-m", "conntrack", "--ctorigdstport", fmt.Sprint(p.viaPort), "-j", "DROP")
}

// heal lets the packets through again.
func (p *apiPartition) heal() {
	p.t.Helper()
	p.iptables("filter", "-F", partitionChain)
}

func (p *apiPartition) iptables(table string, args ...string) {
	p.t.Helper()
	args = append([]string{"-w", "-t", table}, args...)
	if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
		p.t.Fatalf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// remove deletes both chains and checks that nothing of them is left.
func (p *apiPartition) remove() {
	for _, table := range []string{"filter", "nat"} {
		for _, args := range [][]string{{"-D", "OUTPUT", "-j", partitionChain}, {"-F", partitionChain}, {"-X", partitionChain}} {
			_ = exec.Command("iptables", append([]string{"-w", "-t", table}, args...)...).Run()
		}
		if out, _ := exec.Command("iptables", "-w", "-t", table, "-S").Output(); strings.Contains(string(out), partitionChain) {
			p.t.Errorf("the partition's rules are still in the %s table:\n%s", table, out)
		}
	}
}
