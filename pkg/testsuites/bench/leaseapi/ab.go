package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/client-go/kubernetes"

	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	leaseclient "github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testsuites/bench/benchkit"
)

// The A/B part: baseline operators built or given, and their tables.

// cpuPerThousand is the server process's CPU-seconds per 1,000 pairs.
func cpuPerThousand(r result) float64 { return r.cpuPerPair.Seconds() * 1000 }

// formatAB is the table of the operator (this tree) against the baseline
// operator of results' column side, each measured in the same rounds.
func formatAB(cfg config, ref string, results [][]result, side int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nA/B: baseline %s against this tree, %d rounds of %v, alternating.\n\n", ref, len(results), cfg.round)
	b.WriteString("| round | baseline pairs/s | new pairs/s | baseline CPU-s/1000 pairs | new CPU-s/1000 pairs |\n|---:|---:|---:|---:|---:|\n")
	var bp, np, bc, nc []float64
	for i, r := range results {
		o, n := r[side], r[1]
		bp, np = append(bp, o.pairsPerSec), append(np, n.pairsPerSec)
		bc, nc = append(bc, cpuPerThousand(o)), append(nc, cpuPerThousand(n))
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.4f | %.4f |\n", i+1, o.pairsPerSec, n.pairsPerSec, cpuPerThousand(o), cpuPerThousand(n))
	}
	fmt.Fprintf(&b, "| **median** | **%.0f** | **%.0f** | **%.4f** | **%.4f** |\n", median(bp), median(np), median(bc), median(nc))
	fmt.Fprintf(&b, "\nNew/baseline: pairs/s %.2f×, CPU per pair %.2f×.\n", median(np)/median(bp), median(nc)/median(bc))
	return b.String()
}

// baseline is an operator binary to measure beside this tree's.
type baseline struct {
	name, binary string
}

// buildBaselines builds the -baseline-ref refs and lists them with the
// -baseline-binary binaries.
func buildBaselines(ctx context.Context, dir string) ([]baseline, error) {
	var out []baseline
	for i, ref := range splitList(*baselineRef) {
		progress("building cmd/proxy-operator at %s", ref)
		binary, err := buildBaseline(ctx, dir, ref, i)
		if err != nil {
			return nil, err
		}
		out = append(out, baseline{name: ref, binary: binary})
	}
	for _, binary := range splitList(*baselineBinary) {
		out = append(out, baseline{name: filepath.Base(binary), binary: binary})
	}
	return out, nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// buildBaseline builds cmd/proxy-operator at a git ref, in a worktree
// removed afterwards, into dir as proxy-operator-baseline-i.
func buildBaseline(ctx context.Context, dir, ref string, i int) (string, error) {
	tree := filepath.Join(dir, fmt.Sprintf("baseline-src-%d", i))
	if out, err := exec.CommandContext(ctx, "git", "worktree", "add", "--detach", tree, ref).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git worktree add %s: %w: %s", ref, err, out)
	}
	defer func() {
		if out, err := exec.Command("git", "worktree", "remove", "--force", tree).CombinedOutput(); err != nil {
			progress("removing the worktree %s: %v: %s", tree, err, out)
		}
	}()
	binary := filepath.Join(dir, fmt.Sprintf("proxy-operator-baseline-%d", i))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", binary, "./cmd/proxy-operator")
	cmd.Dir, cmd.Stdout, cmd.Stderr = tree, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w", ref, err)
	}
	return binary, nil
}

// startBaselines starts each baseline leading a namespace of its own (its
// own leader election and horizon) with proxies at the same fleet
// addresses. The sides it returns were started, also on an error.
func startBaselines(ctx context.Context, dir, kubeconfig string, crawl versioned.Interface, kube kubernetes.Interface, addrs []string, baselines []baseline, cfg config) ([]side, error) {
	var sides []side
	for i, b := range baselines {
		baseNS := fmt.Sprintf("lease-bench-baseline-%d", i)
		bop, bc, err := startOperator(ctx, dir, b.binary, kubeconfig, crawl, kube, baseNS, addrs, cfg)
		if err != nil {
			return sides, fmt.Errorf("baseline %s: %w", b.name, err)
		}
		sides = append(sides, side{name: "baseline " + b.name, clients: []*leaseclient.Client{bc}, procs: []*benchkit.Process{bop}, ns: baseNS})
	}
	return sides, nil
}
