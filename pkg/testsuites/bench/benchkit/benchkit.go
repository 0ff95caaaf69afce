// Package benchkit is what the benchmark programs under pkg/testsuites/bench
// share: building the real binaries without -race, starting a real
// kube-apiserver and etcd with a kubeconfig for the operator, starting and
// watching child processes such as the operator binary (process.go), ending
// the local provider's instances, and finding free loopback ports.
package benchkit

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// Module is the import path the commands are built from.
const Module = "github.com/proxyfleet/proxy-operator"

// Build builds the named commands of this module (e.g. "proxy-operator",
// "forward-proxy") without -race into dir, where each binary is then
// filepath.Join(dir, name). The compiler's output goes to stderr.
func Build(ctx context.Context, dir string, commands ...string) error {
	args := []string{"build", "-o", dir + "/"}
	for _, c := range commands {
		args = append(args, Module+"/cmd/"+c)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %v: %w", commands, err)
	}
	return nil
}

// StartAPIServer starts kube-apiserver and etcd (pkg/testing/testenv) and
// writes a kubeconfig for them into dir; stop the Env when done.
func StartAPIServer(ctx context.Context, dir string) (env *testenv.Environment, kubeconfig string, err error) {
	env, err = testenv.Start(ctx, testenv.Options{})
	if err != nil {
		return nil, "", err
	}
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		_ = env.Stop()
		return nil, "", err
	}
	return env, kubeconfig, nil
}

// FreePorts returns n loopback ports that were free a moment ago.
func FreePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// KillLocalInstances ends the local provider's instances recorded in
// stateDir: they are detached processes, which outlive the operator.
func KillLocalInstances(stateDir string) {
	paths, _ := filepath.Glob(filepath.Join(stateDir, "*.json"))
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var inst struct {
			PID int `json:"pid"`
		}
		if json.Unmarshal(data, &inst) == nil && inst.PID > 0 {
			_ = syscall.Kill(inst.PID, syscall.SIGKILL)
		}
	}
}
