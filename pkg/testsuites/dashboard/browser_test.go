package dashboard_test

import (
	"context"
	"fmt"
	"iter"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// interval is how often the waits look again.
const interval = 200 * time.Millisecond

// canary is a Secret value that must never reach the page.
const canary = "dashboard-canary-s3cr3t-7f1d"

// chromiumPath is Debian's chromium; a missing browser fails the test.
func chromiumPath(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatal("chromium is not installed: the dashboard's browser test needs Debian's chromium; install it with `make deps` (hack/install-deps.sh)")
	return ""
}

// browserErrors collects what the page logs as an error: console.error,
// uncaught exceptions and browser-log errors such as a failed load.
type browserErrors struct {
	mu   sync.Mutex
	seen []string
}

func (b *browserErrors) collect(messages iter.Seq2[chromedp.ConsoleMessage, error]) {
	for m, err := range messages {
		if err != nil {
			return // the tab closed
		}
		if m.Type == chromedp.ConsoleError || m.IsException() {
			b.mu.Lock()
			b.seen = append(b.seen, m.String()+" "+m.URL)
			b.mu.Unlock()
		}
	}
}

func (b *browserErrors) all() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.seen)
}

// newPage starts headless chromium with one tab, closed when the test ends,
// and collects the tab's errors.
func newPage(t testing.TB) (context.Context, *browserErrors) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox, chromedp.WindowSize(1400, 900),
		chromedp.UserDataDir(t.TempDir()))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	errs := &browserErrors{}
	collected := make(chan struct{})
	messages := chromedp.Console(ctx) // starts the browser; subscribed from here on
	go func() { defer close(collected); errs.collect(messages) }()
	t.Cleanup(func() { cancel(); cancelAlloc(); <-collected })
	return ctx, errs
}

// do runs browser steps, bounded so that a hung page fails the test.
func do(t testing.TB, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t testing.TB, ctx context.Context, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluating %s: %v", js, err)
	}
	return v
}

// rows is the text of each row of the table with id, cells joined by "|".
func rows(ctx context.Context, id string) ([]string, error) {
	js := fmt.Sprintf(`Array.from(document.querySelectorAll('#%s tbody tr')).map(r => Array.from(r.cells).map(c => c.textContent).join('|'))`, id)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[[]string](js))
}

func screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG (below it, JPEG)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return path
}

type fixture struct {
	kube        kubernetes.Interface
	crawl       versioned.Interface
	visible     string // the namespace the viewer may list
	hidden      string // one it may not
	viewerToken string
	op          *operatortest.Process
}

// newFixture runs the operator across all namespaces with
// --lease-auth=kubernetes, a viewer ServiceAccount allowed to list leases
// in one namespace, and a pool in each.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	env := shared.Get(t).Env
	f := &fixture{kube: kubernetes.NewForConfigOrDie(env.Config), crawl: versioned.NewForConfigOrDie(env.Config)}
	f.visible = operatortest.NewNamespace(t, f.kube)
	f.hidden = operatortest.NewNamespace(t, f.kube)
	var err error
	if f.viewerToken, err = env.ServiceAccountToken(t.Context(), f.visible, "viewer", time.Hour); err != nil {
		t.Fatal(err)
	}
	testenv.GrantLeasing(t, f.kube, f.visible, types.NamespacedName{Namespace: f.visible, Name: "viewer"})

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	t.Cleanup(func() { operatortest.KillForwardProxies(t, shared.Get(t).Binary, stateDir) })
	f.op = operatortest.Start(t, operatortest.ProcessOptions{
		Binary: shared.Get(t).Binary, Name: "operator", LogsEnv: "DASHBOARD_LOGS",
		Args: []string{"--kubeconfig=" + kubeconfig, "--leader-elect-namespace=" + f.visible, "-v=2",
			"--lease-auth=kubernetes", "--providers=local", "--local-state-dir=" + stateDir,
			"--dashboard-history-interval=1s"},
	})
	return f
}

func (f *fixture) createPool(t *testing.T, ns, name string, replicas int32, target string) {
	t.Helper()
	p := &crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: crawlv1alpha1.ProxyPoolSpec{Replicas: ptr.To(replicas), Template: crawlv1alpha1.ProxyTemplate{
			Spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal, HealthCheck: crawlv1alpha1.HealthCheck{
				URL: target + "/generate_204", Interval: &metav1.Duration{Duration: time.Second}, Timeout: &metav1.Duration{Duration: 900 * time.Millisecond},
			}},
		}},
	}
	if _, err := f.crawl.CrawlV1alpha1().ProxyPools(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) scale(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	eventually.Check(t, 30*time.Second, interval, "scaling "+name, func(ctx context.Context) error {
		p, err := f.crawl.CrawlV1alpha1().ProxyPools(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Spec.Replicas = ptr.To(replicas)
		_, err = f.crawl.CrawlV1alpha1().ProxyPools(ns).Update(ctx, p, metav1.UpdateOptions{})
		return err
	})
}

// poolRow is the fleet table's row of the pool, "" while there is none.
func poolRow(ctx context.Context, ns, name string) (string, error) {
	all, err := rows(ctx, "pools")
	if err != nil {
		return "", err
	}
	for _, r := range all {
		if strings.HasPrefix(r, ns+"/"+name+"|") {
			return r, nil
		}
	}
	status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("status").textContent + ": " + document.body.innerText.slice(0, 300)`))
	return "", fmt.Errorf("no row for %s/%s in %q; page: %q", ns, name, all, status)
}

// TestDashboardInABrowser: a viewer signs in with a ServiceAccount token
// and sees the fleet of the one namespace it may list, live: a pool
// scaled 3 -> 5 shows 5 Ready without a reload, a CrawlPolicy's rule
// counts the viewer's lease, and the pool's page charts the last samples,
// lists its recent events and, after a ban, the domain the member cools
// down for. Nothing of the other
// namespace, no lease ID, no Secret value and no token reaches the DOM,
// and the page logs no error.
func TestDashboardInABrowser(t *testing.T) {
	f := newFixture(t)
	ctx, browserErrs := newPage(t)
	target := proxytest.StartHTTPTarget(t)
	f.createPool(t, f.visible, "web", 3, target.URL)
	f.createPool(t, f.hidden, "hidden-pool", 1, target.URL)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "proxy-auth",
		Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}},
		StringData: map[string]string{crawlv1alpha1.AuthUsernameKey: "user", crawlv1alpha1.AuthPasswordKey: canary}}
	if _, err := f.kube.CoreV1().Secrets(f.visible).Create(t.Context(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A CrawlPolicy in each namespace: the visible one's rule counts the lease below.
	for ns, name := range map[string]string{f.visible: "polite", f.hidden: "hidden-policy"} {
		policy := &crawlv1alpha1.CrawlPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: crawlv1alpha1.CrawlPolicySpec{
			Rules: []crawlv1alpha1.DomainRule{{Host: "example.com", DomainLimits: crawlv1alpha1.DomainLimits{MaxConcurrent: ptr.To(int32(10))}}}}}
		if _, err := f.crawl.CrawlV1alpha1().CrawlPolicies(ns).Create(t.Context(), policy, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// A lease held in the visible namespace, by the viewer's own identity.
	leases, err := client.New("http://"+f.op.LeaseAddr, client.WithToken(func(context.Context) (string, error) { return f.viewerToken, nil }))
	if err != nil {
		t.Fatal(err)
	}
	var held *client.Lease
	eventually.Check(t, 3*time.Minute, interval, "a lease on a member of web", func(ctx context.Context) error {
		held, err = leases.Acquire(ctx, client.AcquireRequest{Holder: "crawler-dash", Namespace: f.visible, Domain: "example.com", TTL: 10 * time.Minute})
		return err
	})

	// Sign in: the page asks for a token, since the operator checks them.
	url := "http://" + f.op.LeaseAddr + "/ui/"
	do(t, ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.ID("login")),
		chromedp.SendKeys(chromedp.ID("token"), f.viewerToken), chromedp.Click(chromedp.CSS("#login button")))
	eventually.Check(t, 3*time.Minute, interval, "web 3 of 3 Ready in the page", func(context.Context) error {
		row, err := poolRow(ctx, f.visible, "web")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(row, f.visible+"/web|local|3|3|") {
			return fmt.Errorf("row %q", row)
		}
		return nil
	})
	screenshot(t, ctx, "fleet-3.png")

	// Scale 3 -> 5 with the page open; a reload would lose the marker.
	eval[bool](t, ctx, `window.notReloaded = true`)
	f.scale(t, f.visible, "web", 5)
	eventually.Check(t, 3*time.Minute, interval, "web 5 of 5 Ready in the page, live", func(context.Context) error {
		row, err := poolRow(ctx, f.visible, "web")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(row, f.visible+"/web|local|5|5|") {
			return fmt.Errorf("row %q", row)
		}
		return nil
	})
	if !eval[bool](t, ctx, `window.notReloaded === true`) {
		t.Error("the page reloaded to show the scale")
	}
	eventually.Check(t, time.Minute, interval, "the policy's rule holding the lease", func(context.Context) error {
		policies, err := rows(ctx, "policies")
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(policies, func(r string) bool { return strings.HasPrefix(r, f.visible+"/polite|example.com|1|") }) {
			return fmt.Errorf("policies %q", policies)
		}
		return nil
	})
	notShown := map[string]string{"the hidden namespace": f.hidden, "the hidden pool": "hidden-pool", "the hidden policy": "hidden-policy",
		"the lease ID": held.ID, "the Secret's value": canary, "the token": f.viewerToken}
	assertNotInDOM(t, ctx, "the fleet", notShown)
	fleet := screenshot(t, ctx, "fleet-5.png")
	if os.Getenv("UPDATE_SCREENSHOT") != "" {
		png, _ := os.ReadFile(fleet)
		if err := os.WriteFile(filepath.Join(testenv.RepoRoot(t), "docs", "img", "dashboard.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The pool's page: five members, the lease by holder and domain.
	eval[string](t, ctx, fmt.Sprintf(`location.hash = "#pool/%s/web"`, f.visible))
	eventually.Check(t, time.Minute, interval, "five members and the lease on the pool's page", func(context.Context) error {
		members, err := rows(ctx, "members")
		if err != nil {
			return err
		}
		held, err := rows(ctx, "leases")
		if err != nil {
			return err
		}
		if len(members) != 5 || len(held) != 1 || !strings.Contains(held[0], "|crawler-dash|example.com|") {
			return fmt.Errorf("members %q, leases %q", members, held)
		}
		return nil
	})
	// Its charts, from the samples the operator took each second: the
	// lease held, and the five Ready members' latency.
	eventually.Check(t, time.Minute, interval, "the pool's charts", func(context.Context) error {
		charts, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
			`Array.from(document.querySelectorAll('#charts figure')).map(f => f.dataset.points + '|' + f.querySelector('figcaption').textContent)`))
		if err != nil {
			return err
		}
		if len(charts) != 3 || !strings.HasSuffix(charts[0], "|Leases held: 1") || strings.HasPrefix(charts[0], "0|") || strings.HasPrefix(charts[0], "1|") ||
			!strings.Contains(charts[2], "|Mean latency, Ready members: ") || strings.HasSuffix(charts[2], "–") {
			return fmt.Errorf("charts %q: want three, leases held 1 over 2 samples or more, a latency", charts)
		}
		return nil
	})
	// Its recent events: the pool controller's, the scale's members among them.
	eventually.Check(t, time.Minute, interval, "the pool's MemberCreated events on its page", func(context.Context) error {
		events, err := rows(ctx, "events")
		if err != nil {
			return err
		}
		created := 0
		for _, e := range events {
			if strings.Contains(e, "|"+f.visible+"/ProxyPool/web|MemberCreated|Created member web-") {
				created++
			}
		}
		if created < 5 {
			return fmt.Errorf("%d MemberCreated rows, want 5 (one per member); events %q", created, events)
		}
		return nil
	})
	assertNotInDOM(t, ctx, "the pool's page", notShown)

	// The crawler reports a ban: the member cools down for the domain, and
	// its row says so.
	if err := leases.Release(t.Context(), held.ID, client.OutcomeBanned, "example.com"); err != nil {
		t.Fatal(err)
	}
	eventually.Check(t, time.Minute, interval, "the banned member cooling down for example.com", func(context.Context) error {
		members, err := rows(ctx, "members")
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(members, func(r string) bool {
			return strings.HasPrefix(r, f.visible+"/"+held.Proxy.Name+"|") && strings.Contains(r, "|example.com|")
		}) {
			return fmt.Errorf("no row of %s cooling down for example.com: %q", held.Proxy.Name, members)
		}
		return nil
	})
	screenshot(t, ctx, "pool.png")

	if errs := browserErrs.all(); len(errs) > 0 {
		t.Errorf("the page logged errors: %q", errs)
	}
}

// assertNotInDOM fails for each of notShown's strings the page's HTML holds.
func assertNotInDOM(t *testing.T, ctx context.Context, page string, notShown map[string]string) {
	t.Helper()
	dom := eval[string](t, ctx, `document.documentElement.outerHTML`)
	for what, s := range notShown {
		if strings.Contains(dom, s) {
			t.Errorf("%s shows %s (%q)", page, what, s)
		}
	}
}
