package poolintegration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// The crawlers nobody here wrote, as docs/inspection.md tells them to trust
// the published CA: curl with --cacert, Python requests with verify=, and
// an unmodified Scrapy (whose default context factory verifies nothing).
const (
	curlBin    = "/usr/bin/curl"
	pythonBin  = "/usr/bin/python3" // Debian's, with python3-requests
	scrapyPath = "/usr/bin/scrapy"  // Debian's python3-scrapy
)

// outsidePages is each client's share: one more than the site's budget per
// address, so that a sticky session meets at least one ban (its address
// has taken 0..banAfter requests before) and the gateway has to move it.
const outsidePages = banAfter + 1

// pageAnswer is what a client got for one page.
type pageAnswer struct {
	Page     int    `json:"page"`
	Status   int    `json:"status"`
	Body     string `json:"body"`
	Attempts string `json:"attempts"`
}

// crawlWithOutsideClients fetches outsidePages pages per client through the
// inspected gateway, each client on a sticky session of its own: every
// page arrives (the gateway judged the site's bans and retried on a fresh
// IP), and each client saw at least one answer that took two attempts.
func (c *banCrawl) crawlWithOutsideClients(t *testing.T, gw, bundle string) {
	t.Helper()
	for _, bin := range []string{curlBin, pythonBin, scrapyPath} {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%s is missing: run `make deps` (hack/install-deps.sh installs curl, python3-requests and python3-scrapy)", bin)
		}
	}
	clients := []struct {
		name  string
		crawl func(t *testing.T, gw, bundle string, first int) []pageAnswer
	}{
		{"curl", c.curlPages},
		{"requests", c.requestsPages},
		{"scrapy", c.scrapyPages},
	}
	for i, client := range clients {
		first := 1000 * (i + 1) // pages no other crawl asked for
		answers := client.crawl(t, gw, bundle, first)
		if len(answers) != outsidePages {
			t.Errorf("%s: %d answers, want %d", client.name, len(answers), outsidePages)
		}
		retried := 0
		for _, a := range answers {
			if a.Status != http.StatusOK || !strings.Contains(a.Body, fmt.Sprintf("<title>Page %d</title>", a.Page)) {
				t.Errorf("%s, page %d: status %d, body %q; want the page (the gateway retries a ban)", client.name, a.Page, a.Status, a.Body)
			}
			if a.Attempts == "" {
				t.Errorf("%s, page %d: no %s header: the answer was not inspected", client.name, a.Page, gateway.HeaderAttempts)
			}
			if n, _ := strconv.Atoi(a.Attempts); n > 1 {
				retried++
			}
		}
		if retried == 0 {
			t.Errorf("%s: %d pages on one session and no answer took a second attempt; the site bans an address after %d", client.name, len(answers), banAfter)
		}
		t.Logf("%s through inspection: %d pages, %d took more than one attempt", client.name, len(answers), retried)
	}
}

// gatewayUser is the gateway's username for a sticky session of the pool.
func (c *banCrawl) gatewayUser(session string) string {
	return "ns-" + c.pt.ns + "+pool-crawl+session-" + session
}

// curlPages runs curl once per page, trusting the bundle with --cacert;
// --write-out gives the status and the gateway's attempts header.
func (c *banCrawl) curlPages(t *testing.T, gw, bundle string, first int) []pageAnswer {
	var out []pageAnswer
	body := filepath.Join(t.TempDir(), "body")
	for page := first; page < first+outsidePages; page++ {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		cmd := exec.CommandContext(ctx, curlBin, "-sS", "--cacert", bundle, "-o", body,
			"--write-out", "%{http_code} %header{"+gateway.HeaderAttempts+"}",
			"--proxy", "http://"+gw, "--proxy-user", c.gatewayUser("curl")+":none",
			fmt.Sprintf("%s/page/%d", c.site.HTTPS.URL, page))
		written, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("curl, page %d: %v (%s)", page, err, written)
		}
		status, attempts, _ := strings.Cut(string(written), " ")
		code, _ := strconv.Atoi(status)
		got, err := os.ReadFile(body)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pageAnswer{Page: page, Status: code, Body: string(got), Attempts: attempts})
	}
	return out
}

// requestsScript fetches each URL of argv[3:] through the proxy argv[1] on
// one requests.Session, verifying against the bundle argv[2].
const requestsScript = `
import json, sys, requests
proxy, bundle, urls = sys.argv[1], sys.argv[2], sys.argv[3:]
s = requests.Session()
s.proxies = {"http": proxy, "https": proxy}
out = []
for url in urls:
    r = s.get(url, verify=bundle, timeout=60)
    out.append({"status": r.status_code, "body": r.text, "attempts": r.headers.get("Proxy-Operator-Attempts", "")})
print(json.dumps(out))
`

// requestsPages fetches the pages with Python requests, verify=bundle.
func (c *banCrawl) requestsPages(t *testing.T, gw, bundle string, first int) []pageAnswer {
	args := []string{"-c", requestsScript, "http://" + c.gatewayUser("requests") + ":none@" + gw, bundle}
	for page := first; page < first+outsidePages; page++ {
		args = append(args, fmt.Sprintf("%s/page/%d", c.site.HTTPS.URL, page))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, pythonBin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("python requests: %v\n%s", err, stderr.String())
	}
	var out []pageAnswer
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("python requests printed %q: %v", stdout.String(), err)
	}
	for i := range out {
		out[i].Page = first + i
	}
	return out
}

// scrapyPages runs examples/scrapy as it is, one page at a time (one
// download slot, so one session of the gateway).
func (c *banCrawl) scrapyPages(t *testing.T, gw, _ string, first int) []pageAnswer {
	var urls []string
	for page := first; page < first+outsidePages; page++ {
		urls = append(urls, fmt.Sprintf("%s/page/%d", c.site.HTTPS.URL, page))
	}
	items := filepath.Join(t.TempDir(), "items.json")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, scrapyPath, "crawl", "fleet", "-O", items,
		"-s", "CONCURRENT_REQUESTS=1", "-s", "SCHEDULER_MEMORY_QUEUE=scrapy.squeues.FifoMemoryQueue")
	cmd.Dir = filepath.Join(testenv.RepoRoot(t), "examples", "scrapy")
	cmd.Env = append(os.Environ(), "GATEWAY="+gw, "GATEWAY_TOKEN=none", "GATEWAY_NAMESPACE="+c.pt.ns,
		"GATEWAY_POOL=crawl", "LEASE_API=http://"+c.pt.op.LeaseAddr, "START_URLS="+strings.Join(urls, " "), "PYTHONDONTWRITEBYTECODE=1")
	logs, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scrapy crawl: %v\n%s", err, logs)
	}
	data, err := os.ReadFile(items)
	if err != nil {
		t.Fatal(err)
	}
	var got []struct {
		URL      string `json:"url"`
		Status   int    `json:"status"`
		Body     string `json:"body"`
		Attempts string `json:"attempts"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("scrapy items %q: %v\n%s", data, err, logs)
	}
	var out []pageAnswer
	for _, it := range got {
		page, _ := strconv.Atoi(it.URL[strings.LastIndex(it.URL, "/")+1:])
		out = append(out, pageAnswer{Page: page, Status: it.Status, Body: it.Body, Attempts: it.Attempts})
	}
	return out
}
