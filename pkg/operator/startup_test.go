package operator_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// An operator started before its API server answers waits for it: it keeps
// retrying the calls it cannot start without (the lease signing key first),
// then leads and reconciles once the API server is reachable. Under a
// Deployment this is the usual order after a control-plane restart.
func TestStartsBeforeAPIServer(t *testing.T) {
	ns := newNamespace(t)
	addr, kubeconfig := unreachableKubeconfig(t)
	p := startUnreachable(t, "early", ns, kubeconfig)

	waitRetries(t, p, `call="lease signing key"`, 3)

	// The API server "comes up" at the address the operator was given.
	forwardTCP(t, addr, hostOf(t, shared.Get(t).Env.Config.Host))
	waitForLeader(t, startTimeout, p)
	createExternalProxy(t, ns, "px", 31280)
	waitConverged(t, ns, 1, convergeTimeout)
}

// SIGTERM while waiting for the API server is a clean stop: exit 0, no
// "failed" in the log.
func TestSIGTERMWhileWaitingForAPIServer(t *testing.T) {
	ns := newNamespace(t)
	_, kubeconfig := unreachableKubeconfig(t)
	p := startUnreachable(t, "waiting", ns, kubeconfig)
	waitRetries(t, p, `call="lease signing key"`, 1)

	p.Signal(t, syscall.SIGTERM)
	if code := p.WaitExit(t, 5*time.Second); code != 0 {
		t.Errorf("exit code after SIGTERM during start-up = %d, want 0", code)
	}
	logs := p.Logs()
	if !strings.Contains(logs, "Stopped during start-up") {
		t.Errorf("log lacks %q", "Stopped during start-up")
	}
	if strings.Contains(logs, "proxy-operator failed") {
		t.Errorf("log reports a failure after a requested stop")
	}
}

// unreachableKubeconfig writes the environment's admin kubeconfig with the
// server moved to a loopback address where nothing listens yet.
func unreachableKubeconfig(t *testing.T) (addr, path string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "kubeconfig")
	if err := shared.Get(t).Env.WriteKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	addr = fmt.Sprintf("127.0.0.1:%d", operatortest.FreePorts(t, 1)[0])
	for _, cluster := range cfg.Clusters {
		cluster.Server = "https://" + addr // the serving cert names 127.0.0.1
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return addr, path
}

func startUnreachable(t *testing.T, name, ns, kubeconfig string) *operatortest.Process {
	t.Helper()
	return operatortest.Start(t, operatortest.ProcessOptions{
		Binary:  shared.Get(t).Binary,
		Name:    name,
		Args:    append([]string{"--kubeconfig=" + kubeconfig, "--namespace=" + ns, "--leader-elect-namespace=" + ns, "-v=2"}, leaseTimings...),
		LogsEnv: "OPERATOR_TEST_LOGS",
	})
}

// waitRetries waits until p has logged at least n retries of the call
// named by callField.
func waitRetries(t *testing.T, p *operatortest.Process, callField string, n int) {
	t.Helper()
	eventually.Check(t, startTimeout, pollInterval, fmt.Sprintf("%d retries of %s", n, callField), func(context.Context) error {
		if !p.Running() {
			t.Fatalf("operator %s exited while the API server was unreachable: %s", p.Name, p.Exit())
		}
		got := 0
		for line := range strings.Lines(p.Logs()) {
			if strings.Contains(line, "Kubernetes API unavailable; retrying") && strings.Contains(line, callField) {
				got++
			}
		}
		if got < n {
			return fmt.Errorf("%d retries logged", got)
		}
		return nil
	})
}

func hostOf(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// forwardTCP relays every connection to from to to, until the test ends.
func forwardTCP(t *testing.T, from, to string) {
	t.Helper()
	ln, err := net.Listen("tcp", from)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					t.Errorf("forwarder: %v", err)
				}
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(out, in); out.Close() }()
			go func() { defer wg.Done(); io.Copy(in, out); in.Close() }()
		}
	}()
}
