package e2e_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/operator"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
)

// maxLinesPerProxyLife bounds, at the default verbosity, the log lines
// about one Managed proxy from its creation to its deletion.
const maxLinesPerProxyLife = 10

// TestLogsAndEventsCarryNoSecrets runs the operator through every flow at
// the default verbosity, -v=4 and -v=6, with a credentials Secret and
// cloud-init Secrets of distinctive content, and looks for that content
// (plain, and base64 at every alignment) in everything the operator wrote:
// its stdout and stderr, the events in the run's namespaces, the Proxies'
// status. It also checks the shape of the logs: at the default verbosity a
// proxy's life is a handful of lines keyed by the proxy; from -v=4 on every
// sync logs one "Syncing" line.
func TestLogsAndEventsCarryNoSecrets(t *testing.T) {
	s := newSuite(t)
	verbosities := map[string]struct {
		args []string
		// everySync: "Syncing" once per sync (V(4)), or never.
		everySync bool
	}{
		"default": {},
		"v4":      {args: []string{"-v=4"}, everySync: true},
		"v6":      {args: []string{"-v=6"}, everySync: true},
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxConcurrentRuns)
	for name, tc := range verbosities {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			t.Run(name, func(t *testing.T) {
				a := s.artifacts.forInstallation(installation{namespace: "po-logs-" + name, suffix: "logs-" + name})
				r := s.startRun(t, "logs-"+name, a, runOptions{args: tc.args})
				for _, res := range r.runFlows(t.Context(), nil) {
					if !res.completed() {
						t.Fatalf("flow %v", res)
					}
				}
				syncs := r.waitIdle(t)
				// The lease API's signing key, which the first replica made, is a secret too.
				key, err := s.kube.CoreV1().Secrets(r.ns).Get(t.Context(), operator.LeaseKeySecret, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				var values []string
				for _, v := range key.Data {
					values = append(values, string(v))
				}
				// So are the credentials the operator generated for Managed
				// proxies without spec.auth (every run's: more forbidden
				// strings never hurt).
				generated, err := s.kube.CoreV1().Secrets("").List(t.Context(), metav1.ListOptions{LabelSelector: controller.GeneratedCredentialsLabel})
				if err != nil {
					t.Fatal(err)
				}
				for _, g := range generated.Items {
					for _, v := range g.Data {
						values = append(values, string(v))
					}
				}
				t.Logf("%d generated credentials Secrets among the forbidden values", len(generated.Items))
				forbidden := secretForms(append(secretValues.all(), values...))
				logs := r.op.Logs()
				t.Logf("%d log lines, %d bytes, for %v syncs", strings.Count(logs, "\n"), len(logs), syncs)

				sources := map[string]string{
					"the operator's output": logs,
					// From -v=8 client-go dumps binary bodies in hex.
					"the hex dumps in the operator's output": string(hexDumpBytes(logs)),
				}
				for _, ns := range []string{r.ns, r.proxies} {
					events, err := s.kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{})
					if err != nil {
						t.Fatal(err)
					}
					sources["the events in "+ns] = mustJSON(t, events)
				}
				proxies, err := s.crawl.CrawlV1alpha1().Proxies(r.proxies).List(t.Context(), metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				sources["the Proxies"] = mustJSON(t, proxies)
				for where, text := range sources {
					for _, f := range forbidden {
						if i := strings.Index(text, f.text); i >= 0 {
							t.Errorf("%s hold %s: …%s…", where, f.what, text[max(0, i-80):i])
						}
					}
				}

				if tc.everySync {
					// Work may come after the first idle (a new pool member's
					// first verdict: a proxy without an address yet is no
					// "unknown" verdict), so the count above may be stale:
					// waitIdle polls until the operator idles with one
					// "Syncing" line per counted sync, and fails otherwise.
					syncs = r.waitIdle(t)
				}
				syncLines := r.op.logLines(regexp.MustCompile(`"Syncing" proxy="`))
				if tc.everySync && len(syncLines) == 0 {
					t.Errorf("no \"Syncing\" lines for %v syncs, want one per sync", syncs)
				}
				if !tc.everySync && len(syncLines) != 0 {
					t.Errorf("%d \"Syncing\" lines at the default verbosity, want none: %q", len(syncLines), syncLines[0])
				}
				if tc.everySync {
					return
				}
				for _, proxy := range []string{managedProxy, retryProxy, externalProxy} {
					key := r.proxies + "/" + proxy
					lines := r.op.logLines(regexp.MustCompile(`(^|[^a-z0-9-])` + regexp.QuoteMeta(key) + `($|[^a-z0-9.-])`))
					t.Logf("%s: %d lines at the default verbosity:\n%s", key, len(lines), strings.Join(lines, "\n"))
					if proxy == managedProxy && len(lines) > maxLinesPerProxyLife {
						t.Errorf("%d lines about %s from its creation to its deletion, want at most %d", len(lines), key, maxLinesPerProxyLife)
					}
					for _, l := range lines {
						if !strings.Contains(l, `proxy="`+key+`"`) {
							t.Errorf("a line about %s is not keyed by it (proxy=%q): %s", key, key, l)
						}
					}
				}
			})
		})
	}
	wg.Wait()
}

// waitIdle waits until the operator has nothing queued or running and
// every sync it started has finished, and returns how many syncs it made.
func (r *operatorRun) waitIdle(t *testing.T) float64 {
	t.Helper()
	var syncs float64
	eventually.Check(t, 20*time.Second, pollInterval, "the operator idles", func(ctx context.Context) error {
		s, err := r.op.Scrape(ctx)
		if err != nil {
			return err
		}
		proxies := map[string]string{"name": "proxies"}
		depth, _ := s.Value("workqueue_depth", proxies)
		busy, _ := s.Value("workqueue_unfinished_work_seconds", proxies)
		done, _ := s.Value("workqueue_work_duration_seconds", proxies)
		syncs, _ = s.Value("proxy_operator_reconcile_total", nil)
		unknown, _ := s.Value("proxy_operator_proxies_by_verdict", map[string]string{"verdict": "unknown"})
		if depth != 0 || busy != 0 || syncs != done || unknown != 0 {
			return fmt.Errorf("depth %v, unfinished work %vs, %v syncs counted, %v finished, %v proxies without a verdict", depth, busy, syncs, done, unknown)
		}
		if n := len(r.op.logLines(regexp.MustCompile(`"Syncing" proxy="`))); n != 0 && float64(n) != syncs {
			return fmt.Errorf("%d syncs logged, %v counted", n, syncs)
		}
		return nil
	})
	return syncs
}

// hexDumpLine is a line of hex.Dump output: offset, up to 16 bytes in hex.
var hexDumpLine = regexp.MustCompile(`^\s*[0-9a-f]{8}  ((?:[0-9a-f]{2} {1,2}){1,16})`)

// hexDumpBytes reassembles the bytes of the hex dumps in a log (client-go
// logs protobuf bodies so), so that a secret split across dump lines is
// found whole.
func hexDumpBytes(log string) []byte {
	var out []byte
	for line := range strings.Lines(log) {
		m := hexDumpLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		b, err := hex.DecodeString(strings.ReplaceAll(m[1], " ", ""))
		if err == nil {
			out = append(out, b...)
		}
	}
	return out
}

// secretForm is one way a secret value could be written out.
type secretForm struct {
	what, text string
}

// secretForms returns each value as it is and as it would appear inside
// base64 (standard and URL alphabets) at each of the three alignments it
// may have in a longer encoded text (a Secret's data field, a dumped body).
func secretForms(values []string) []secretForm {
	var out []secretForm
	for _, v := range values {
		out = append(out,
			secretForm{fmt.Sprintf("the secret value %q", v), v},
			secretForm{fmt.Sprintf("%q in hex", v), hex.EncodeToString([]byte(v))})
		for shift := range 3 {
			encoded := base64.StdEncoding.EncodeToString(append(make([]byte, shift), v...))
			// Skip the characters that mix in the padding bytes before v, and
			// the last ones, which depend on what follows v.
			start := []int{0, 2, 3}[shift]
			core := strings.TrimRight(encoded, "=")
			core = core[start : len(core)-2]
			out = append(out,
				secretForm{fmt.Sprintf("%q in base64 (alignment %d)", v, shift), core},
				secretForm{fmt.Sprintf("%q in URL-safe base64 (alignment %d)", v, shift), strings.NewReplacer("+", "-", "/", "_").Replace(core)})
		}
	}
	return out
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestSecretForms: whatever surrounds a secret value, one of its forms is
// found in the base64 of the whole.
func TestSecretForms(t *testing.T) {
	const value = "p-91ab5e2d77c0"
	forms := secretForms([]string{value})
	tests := map[string]struct{ before, after string }{
		"alone":           {},
		"one byte before": {before: "x"},
		"two before":      {before: "xy"},
		"three before":    {before: "xyz", after: "\n"},
		"in cloud-init":   {before: "#cloud-config\n# ", after: "\nruncmd: [\"true\"]\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			whole := []byte(tc.before + value + tc.after)
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding} {
				text := enc.EncodeToString(whole)
				found := false
				for _, f := range forms {
					found = found || strings.Contains(text, f.text)
				}
				if !found {
					t.Errorf("no form of %q in %s", value, text)
				}
			}
		})
	}
}
