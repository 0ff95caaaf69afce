package gatewayintegration

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// The real clients: curl and Python requests, run as processes.

const python = "/usr/bin/python3" // Debian's, with python3-requests (not a pyenv on PATH)

func requireBinary(t *testing.T, path string) {
	t.Helper()
	integration.Needs(t, path+" from Debian (`make deps`)")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing: run `make deps` (hack/install-deps.sh installs curl, python3-requests and python3-scrapy)", path)
	}
}

// curlResult is what curl saw.
type curlResult struct {
	// status is the final response's code; connect the CONNECT answer's (0 without one).
	status, connect int
	body            string
	// verbose is curl -v's stderr: every header both ways.
	verbose string
}

// caFile writes a TLS target's certificate for curl's --cacert.
func caFile(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// curl fetches target through proxy ("" : none) with curl -v.
func curl(t *testing.T, proxy, target string, extra ...string) curlResult {
	t.Helper()
	requireBinary(t, "/usr/bin/curl")
	bodyFile := filepath.Join(t.TempDir(), "body")
	args := []string{"-sS", "-v", "--max-time", "30", "-o", bodyFile, "-w", "%{http_code} %{http_connect}"}
	if proxy != "" {
		args = append(args, "-x", proxy)
	}
	args = append(args, extra...)
	args = append(args, target)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/curl", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run() // a refused CONNECT is a non-zero exit: the codes tell
	var r curlResult
	if _, err := fmt.Sscan(stdout.String(), &r.status, &r.connect); err != nil {
		t.Fatalf("curl printed %q (%v); stderr:\n%s", stdout.String(), err, stderr.String())
	}
	body, _ := os.ReadFile(bodyFile)
	r.body, r.verbose = string(body), stderr.String()
	return r
}

// pyResult is one request's outcome in Python requests.
type pyResult struct {
	Status  int               `json:"status"`
	Text    string            `json:"text"`
	Headers map[string]string `json:"headers"`
	Error   string            `json:"error"`
}

// requestsScript fetches each job's URLs in order through its proxy; jobs
// run at once in threads that start together (a barrier), so that their
// first connections overlap.
const requestsScript = `
import json, sys, threading, requests, urllib3
urllib3.disable_warnings()
jobs = json.loads(sys.argv[1])
out = [None] * len(jobs)
barrier = threading.Barrier(len(jobs))
def run(i, job):
    s = requests.Session()
    s.proxies = {"http": job["proxy"], "https": job["proxy"]}
    results = []
    barrier.wait()
    for url in job["urls"]:
        try:
            r = s.get(url, verify=False, timeout=30)
            results.append({"status": r.status_code, "text": r.text, "headers": dict(r.headers)})
        except Exception as e:
            results.append({"error": repr(e)})
    out[i] = results
threads = [threading.Thread(target=run, args=(i, j)) for i, j in enumerate(jobs)]
for th in threads: th.start()
for th in threads: th.join()
print(json.dumps(out))
`

type pyJob struct {
	Proxy string   `json:"proxy"`
	URLs  []string `json:"urls"`
}

// pyRequests runs jobs in Python requests and returns each job's results.
func pyRequests(t *testing.T, jobs ...pyJob) [][]pyResult {
	t.Helper()
	requireBinary(t, python)
	arg, err := json.Marshal(jobs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", requestsScript, string(arg))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("python requests: %v\n%s", err, stderr.String())
	}
	var out [][]pyResult
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("python requests printed %q: %v", stdout.String(), err)
	}
	return out
}

// servedBy polls the upstreams' logs for marker and returns the name of
// the one that has it; it fails unless exactly one does.
func servedBy(t *testing.T, ups []*upstream, marker string) string {
	t.Helper()
	var found []string
	err := proxytest.Poll(10*time.Second, func() bool {
		found = found[:0]
		for _, u := range ups {
			if strings.Contains(u.proxy.Logs(), marker) {
				found = append(found, u.name)
			}
		}
		return len(found) > 0
	})
	if err != nil || len(found) != 1 {
		t.Fatalf("marker %q in the logs of %v, want exactly one upstream", marker, found)
	}
	return found[0]
}
