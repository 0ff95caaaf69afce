package gatewayintegration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

const scrapyBin = "/usr/bin/scrapy" // Debian's python3-scrapy

// TestScrapyCrawlThroughTheGateway runs examples/scrapy: one session per
// download slot sticks to one upstream; a 429 is judged a ban by the
// gateway itself (the default ban detection), which moves the session and
// sends the request again through another upstream, so that Scrapy gets
// the page and its middleware has no ban to report.
func TestScrapyCrawlThroughTheGateway(t *testing.T) {
	requireBinary(t, scrapyBin)
	h := startHarness(t, "gw-scrapy", harnessOptions{})
	ups := h.fleet(t, "crawl", 2, false)
	token := h.crawler(t, "crawler", true)
	target := startTarget(t)

	out := filepath.Join(t.TempDir(), "items.json")
	urls := []string{target.URL + "/echo?m=sc-1", target.URL + "/echo?m=sc-2", target.URL + "/echo?m=sc-3", target.URL + "/ban-once/sc-ban"}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, scrapyBin, "crawl", "fleet", "-O", out,
		// In order, one at a time, so that the ban comes after the three.
		"-s", "CONCURRENT_REQUESTS=1", "-s", "SCHEDULER_MEMORY_QUEUE=scrapy.squeues.FifoMemoryQueue")
	cmd.Dir = filepath.Join(testenv.RepoRoot(t), "examples", "scrapy")
	cmd.Env = append(os.Environ(), "GATEWAY="+h.gatewayAddr, "GATEWAY_TOKEN="+token, "GATEWAY_NAMESPACE="+h.ns,
		"GATEWAY_POOL=crawl", "LEASE_API="+h.leaseURL, "START_URLS="+strings.Join(urls, " "), "PYTHONDONTWRITEBYTECODE=1")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Run(); err != nil {
		t.Fatalf("scrapy crawl: %v\n%s", err, logs.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var items []struct {
		URL    string `json:"url"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(data, &items); err != nil {
		t.Fatalf("items %q: %v", data, err)
	}
	if len(items) != len(urls) {
		t.Fatalf("scrapy yielded %d items, want %d:\n%s\n%s", len(items), len(urls), data, logs.String())
	}
	for _, it := range items {
		if it.Status != http.StatusOK {
			t.Errorf("item %+v", it)
		}
	}
	first := servedBy(t, ups, "m=sc-1")
	for _, m := range []string{"m=sc-2", "m=sc-3"} {
		if got := servedBy(t, ups, m); got != first {
			t.Errorf("%s went through %s, the slot's session through %s", m, got, first)
		}
	}
	// The banned attempt went through the session's upstream, the retry
	// through the other one.
	for _, u := range ups {
		if n := strings.Count(u.proxy.Logs(), "/ban-once/sc-ban"); n != 1 {
			t.Errorf("upstream %s saw the banned URL %d times, want once (the ban on the session's, the retry on the other)", u.name, n)
		}
	}
	if strings.Contains(logs.String(), "Reported a ban of session") {
		t.Errorf("the middleware saw a ban the gateway should have retried:\n%s", logs.String())
	}
	h.noCredentials(t, ups, logs.String(), string(data))
}

// TestScrapyKeepsItsJarWithTheIP runs examples/scrapy twice with
// SESSION_STATE=1 against a site that sets a cookie on the first visit:
// the second crawl, a new process whose slot gets the same proxy for the
// same domain, sends the first crawl's cookie on its first request.
func TestScrapyKeepsItsJarWithTheIP(t *testing.T) {
	requireBinary(t, scrapyBin)
	h := startHarness(t, "gw-scrapy-jar", harnessOptions{wait: 30 * time.Second, sessionIdle: time.Minute})
	h.fleet(t, "crawl", 2, false)
	token := h.crawler(t, "crawler", true)
	var seq atomic.Int32
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie("sid"); err == nil {
			fmt.Fprintf(w, "sid=%s", c.Value)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: fmt.Sprintf("visitor-%d", seq.Add(1)), Path: "/"})
		fmt.Fprint(w, "no cookie")
	}))
	t.Cleanup(site.Close)

	var lastLogs string
	crawl := func() []string {
		t.Helper()
		out := filepath.Join(t.TempDir(), "items.json")
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, scrapyBin, "crawl", "fleet", "-O", out)
		cmd.Dir = filepath.Join(testenv.RepoRoot(t), "examples", "scrapy")
		cmd.Env = append(os.Environ(), "GATEWAY="+h.gatewayAddr, "GATEWAY_TOKEN="+token, "GATEWAY_NAMESPACE="+h.ns,
			"GATEWAY_POOL=crawl", "LEASE_API="+h.leaseURL, "START_URLS="+site.URL+"/", "SESSION_STATE=1", "PYTHONDONTWRITEBYTECODE=1")
		logs, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("scrapy crawl: %v\n%s", err, logs)
		}
		lastLogs = string(logs)
		if strings.Contains(string(logs), "visitor-1") {
			t.Errorf("the cookie's value appears in Scrapy's log:\n%s", logs)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var items []struct {
			Body string `json:"body"`
		}
		if err := json.Unmarshal(data, &items); err != nil {
			t.Fatalf("items %s: %v\n%s", data, err, logs)
		}
		var bodies []string
		for _, it := range items {
			bodies = append(bodies, it.Body)
		}
		return bodies
	}
	if got := crawl(); !slices.Equal(got, []string{"no cookie"}) {
		t.Fatalf("first crawl saw %q, want a first visit", got)
	}
	if got := crawl(); !slices.Equal(got, []string{"sid=visitor-1"}) {
		t.Errorf("second crawl saw %q, want the first crawl's cookie back with the IP; its log:\n%s", got, lastLogs)
	}
	if strings.Contains(h.logs.String(), "visitor-1") {
		t.Error("the jar appears in the lease API's or the gateway's logs")
	}
}
