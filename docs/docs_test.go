// Package docs_test checks that the docs name only what exists: every
// --flag of the project's programs, every `make target` and every metric
// (proxy_operator_*, forward_proxy_*) that README.md and docs/*.md mention,
// and the README's Layout every package under pkg/ and no path that is not
// there (layout_test.go).
// docs/decisions and docs/benchmarks-runs.md are history and are not
// checked. `make verify` runs it (make verify-docs); it starts nothing.
package docs_test

import (
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/hack/local-up/options"
	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/gatewaycmd"
	"github.com/proxyfleet/proxy-operator/pkg/metrics"
	"github.com/proxyfleet/proxy-operator/pkg/operator"
)

// foreignPrograms are commands whose flags are not ours: the flags of a
// code line or code span that runs one of them are not checked.
var foreignPrograms = map[string]bool{
	"aws": true, "az": true, "bin/kubectl": true, "curl": true, "docker": true, "gcloud": true,
	"go": true, "helm": true, "kubectl": true, "skopeo": true,
}

// foreignFlags are flags of other programs that the docs name in prose,
// with whose they are.
var foreignFlags = map[string]string{
	"admit-wait":                          "examples/crawler",
	"ignore-certificate-errors-spki-list": "Chrome",
	"masquerade-all":                      "kube-proxy",
	"platforms":                           "hack/image (make image's program, a module of its own)",
	"proxy-server":                        "Chrome",
	"proxy-user":                          "curl",
	"source-ranges":                       "gcloud compute firewall-rules create",
	"unsafe-no-fsync":                     "etcd",
}

func TestDocsNameOnlyFlagsThatExist(t *testing.T) {
	flags := programFlags()
	for _, m := range scanDocs(t).flags {
		if !flags[m.name] && foreignFlags[m.name] == "" {
			t.Errorf("%s: --%s is a flag of none of proxy-operator, proxy-operator gateway, forward-proxy and local-up "+
				"(fix the doc; a flag of another program goes into foreignPrograms or foreignFlags of docs/docs_test.go)", m.where, m.name)
		}
	}
}

func TestDocsNameOnlyMakeTargetsThatExist(t *testing.T) {
	targets := makeTargets(t)
	for _, m := range scanDocs(t).targets {
		if !targets[m.name] {
			t.Errorf("%s: `make %s` names no target of the Makefile", m.where, m.name)
		}
	}
}

func TestDocsNameOnlyMetricsThatExist(t *testing.T) {
	exported := exportedMetrics(t)
	for _, m := range scanDocs(t).metrics {
		if !exported[m.name] {
			t.Errorf("%s: metric %s is exported by neither the operator's registry (pkg/metrics, the gateway's metrics included) nor forward-proxy", m.where, m.name)
		}
	}
}

// programFlags is every flag of the project's programs, from the flag sets
// they parse.
func programFlags() map[string]bool {
	operatorOpts := operator.DefaultOptions()
	var showVersion bool
	gatewayOpts := gatewaycmd.DefaultOptions()
	var forward forwardproxy.CommandLine
	var localUp options.Options
	flags := map[string]bool{}
	for _, fs := range []*flag.FlagSet{
		operator.NewFlagSet(&operatorOpts, &showVersion),
		gatewaycmd.NewFlagSet(&gatewayOpts),
		forwardproxy.NewFlagSet("forward-proxy", &forward, "the environment"),
		options.NewFlagSet(&localUp),
	} {
		fs.VisitAll(func(f *flag.Flag) { flags[f.Name] = true })
	}
	return flags
}

// makeTarget is a rule's target list in the Makefile.
var makeTarget = regexp.MustCompile(`(?m)^([a-zA-Z0-9_.-]+(?:[ \t]+[a-zA-Z0-9_.-]+)*)[ \t]*:([^=]|$)`)

func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range makeTarget.FindAllStringSubmatch(string(data), -1) {
		for _, name := range strings.Fields(m[1]) {
			targets[name] = true
		}
	}
	return targets
}

// exportedMetrics is every metric name the operator's registry (with the
// promhttp ones), a gateway replica's and forward-proxy can export,
// with the series names of histograms and summaries.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	// Names only: no label value adds or removes a family.
	m := metrics.New(metrics.Labels{})
	m.Handler() // registers the promhttp_* families
	names := m.Names()
	names = append(names, metrics.GatewayNames()...)
	names = append(names, forwardProxyMetrics(t)...)
	exported := map[string]bool{}
	for _, n := range names {
		exported[n] = true
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			exported[n+suffix] = true
		}
	}
	return exported
}

// forwardProxyMetrics scrapes a forward-proxy Server's /metrics without
// listening: it pre-declares every series.
func forwardProxyMetrics(t *testing.T) []string {
	t.Helper()
	srv, err := forwardproxy.New(forwardproxy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, forwardproxy.MetricsPath, nil))
	var names []string
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if fields := strings.Fields(line); len(fields) >= 3 && fields[0] == "#" && fields[1] == "TYPE" {
			names = append(names, fields[2])
		}
	}
	if len(names) == 0 {
		t.Fatal("forward-proxy /metrics: no metric")
	}
	return names
}

// A mention is a name a doc uses, and where.
type mention struct {
	name  string
	where string // file:line
}

type mentions struct {
	flags, targets, metrics []mention
}

var (
	// flagName is a long flag; "--" after a word character or another
	// dash (a dash of prose, an em-dash drawn as --) is not one.
	flagName = regexp.MustCompile(`(?:^|[^\w-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)`)
	// makeCall is "make" with the targets after it (words up to the
	// first variable assignment, flag or comment).
	makeCall   = regexp.MustCompile(`(?:^|[^\w-])make((?:[ \t]+[a-z][a-z0-9-]*)+)`)
	metricName = regexp.MustCompile(`\b(?:proxy_operator|forward_proxy)_[a-z0-9_]*[a-z0-9]`)
	codeSpan   = regexp.MustCompile("`([^`]+)`")
)

// scanDocs reads every doc: flags are taken from code and prose (but for
// the commands of foreignPrograms), make targets from code only (prose
// says "make a role"), metric names from everywhere.
func scanDocs(t *testing.T) mentions {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return f == "benchmarks-runs.md" })
	files = append(files, filepath.Join("..", "README.md"))
	if len(files) < 5 {
		t.Fatalf("docs found: %q; does the test run in docs/?", files)
	}
	var all mentions
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		all.add(file, string(data))
	}
	if len(all.flags) == 0 || len(all.targets) == 0 || len(all.metrics) == 0 {
		t.Fatalf("the docs name %d flags, %d make targets and %d metrics: the scan is broken", len(all.flags), len(all.targets), len(all.metrics))
	}
	t.Logf("%d docs name flags %d times, make targets %d times, metrics %d times", len(files), len(all.flags), len(all.targets), len(all.metrics))
	return all
}

// add scans one doc. In a fenced or indented code block every line is
// code, and a command continued with a trailing backslash is one command;
// text after " #" is a comment, read as prose. A code span may go on over a
// line break.
func (all *mentions) add(file, doc string) {
	inBlock, continued, foreignCommand := false, false, false
	openSpan := "" // the start of a code span that goes on on the next line
	for i, line := range strings.Split(doc, "\n") {
		where := file + ":" + strconv.Itoa(i+1)
		for _, name := range metricName.FindAllString(line, -1) {
			all.metrics = append(all.metrics, mention{name, where})
		}
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock, continued = !inBlock, false
			continue
		}
		if !inBlock && !strings.HasPrefix(line, "    ") {
			line = openSpan + line
			openSpan = ""
			if strings.Count(line, "`")%2 == 1 {
				cut := strings.LastIndex(line, "`")
				line, openSpan = line[:cut], line[cut:]+" "
			}
			all.addProse(line, where)
			continue
		}
		code, comment, _ := strings.Cut(line, " #")
		all.addProse(comment, where)
		if !continued {
			foreignCommand = runsForeignProgram(code)
		}
		continued = strings.HasSuffix(strings.TrimSpace(code), `\`)
		all.addCode(code, foreignCommand, where)
	}
}

// addProse scans text outside code blocks: its code spans as code, the
// rest for flags only.
func (all *mentions) addProse(text, where string) {
	for _, span := range codeSpan.FindAllStringSubmatch(text, -1) {
		all.addCode(span[1], runsForeignProgram(span[1]), where)
	}
	for _, m := range flagName.FindAllStringSubmatch(codeSpan.ReplaceAllString(text, " "), -1) {
		all.flags = append(all.flags, mention{m[1], where})
	}
}

func (all *mentions) addCode(code string, foreign bool, where string) {
	for _, m := range makeCall.FindAllStringSubmatch(code, -1) {
		for _, target := range strings.Fields(m[1]) {
			all.targets = append(all.targets, mention{target, where})
		}
	}
	if foreign {
		return
	}
	for _, m := range flagName.FindAllStringSubmatch(code, -1) {
		all.flags = append(all.flags, mention{m[1], where})
	}
}

// runsForeignProgram reports whether a command line (after a "$ " prompt,
// variable assignments and sudo) runs one of foreignPrograms.
func runsForeignProgram(command string) bool {
	words := strings.Fields(command)
	for len(words) > 0 && (words[0] == "$" || words[0] == "sudo" || strings.Contains(words[0], "=")) {
		words = words[1:]
	}
	return len(words) > 0 && foreignPrograms[words[0]]
}

// The scan finds what a reader would take for a flag, a make target or a
// metric, and leaves other programs' flags and prose alone.
func TestScanTakesWhatAReaderWould(t *testing.T) {
	doc := strings.Join([]string{
		"Run `proxy-operator --lease-auth=none` or `make run ARGS=--gateway-listen=`;",     // 1: a span, a make call with a variable
		"prose names --workers, and -- is a dash; make a role, proxy_operator_build_info.", // 2: prose flag, dash, prose make, metric
		"```sh",
		"make verify test   # then --v=2", // 4: two targets, a flag in a comment
		"gcloud compute instances list --project=P \\", // 5: another program's flags
		"  --filter=x",              // 6: ... continued
		"bin/local-up --dir .local", // 7: ours
		"```",
		"A span over `helm install x", // 9: a span going on over the line break
		"--create-namespace` ends; then `--examples` does.", // 10
		"",
		"    kubectl delete proxies --all", // 12: an indented block
	}, "\n")
	var got mentions
	got.add("d.md", doc)
	want := mentions{
		flags: []mention{
			{"lease-auth", "d.md:1"}, {"gateway-listen", "d.md:1"}, {"workers", "d.md:2"},
			{"v", "d.md:4"}, {"dir", "d.md:7"}, {"examples", "d.md:10"},
		},
		targets: []mention{{"run", "d.md:1"}, {"verify", "d.md:4"}, {"test", "d.md:4"}},
		metrics: []mention{{"proxy_operator_build_info", "d.md:2"}},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(mentions{}, mention{})); diff != "" {
		t.Errorf("mentions (-want +got):\n%s", diff)
	}
}
