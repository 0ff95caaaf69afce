package poolintegration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/provider/upstream"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/geoiptest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// The vendor's usernames in the geography test: with a country or without.
const (
	geoPattern       = `customer-acme-zone-res(?:-country-(?:us|de))?-session-([0-9a-f]{16})`
	geoPlainTemplate = "customer-acme-zone-res-session-{session}"
)

// countryEcho is an ipinfo-like echo, {"ip":"<client address>","country":"<code>"},
// whose country for each address the test sets: the geography the
// vendor's loopback exits do not have.
type countryEcho struct {
	url       string
	mu        sync.Mutex
	countries map[string]string
}

func startCountryEcho(t *testing.T) *countryEcho {
	e := &countryEcho{countries: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		e.mu.Lock()
		country := e.countries[host]
		e.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"ip": host, "country": country, "org": "AS64500 Test"})
	}))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

func (e *countryEcho) set(ip, country string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.countries[ip] = country
}

// geoSpec is a session of the vendor whose health check reads exit IP and
// country from the echo's JSON (spec.healthCheck.exitInfo, its defaults).
func geoSpec(t *testing.T, vendorAddr string, echo *countryEcho, template string) crawlv1alpha1.ProxySpec {
	spec := upstreamSpec(t, vendorAddr, echo.url, "vendor", template)
	spec.HealthCheck.URL, spec.HealthCheck.ExitIPFromBody = echo.url+"/json", false
	spec.HealthCheck.ExitInfo = &crawlv1alpha1.ExitInfo{}
	if !strings.Contains(template, "{country}") {
		spec.Upstream.Countries = nil
	}
	spec.MaxLeases = 4 // rotating requests through the gateway need not wait for the last release
	return spec
}

// readyWithExitIPs is the pool's members once n are Ready with measured,
// distinct exit IPs, oldest first.
func (pt *poolTest) readyWithExitIPs(ctx context.Context, pool string, n int) ([]crawlv1alpha1.Proxy, error) {
	ms, err := pt.members(ctx, pool)
	if err != nil {
		return nil, err
	}
	ips := map[string]bool{}
	for _, m := range ms {
		if m.Status.Phase != crawlv1alpha1.PhaseReady || m.Status.ExitIP == "" || m.DeletionTimestamp != nil || ips[m.Status.ExitIP] {
			return nil, fmt.Errorf("member %s: phase %s, exit IP %q", m.Name, m.Status.Phase, m.Status.ExitIP)
		}
		ips[m.Status.ExitIP] = true
	}
	if len(ms) != n {
		return nil, fmt.Errorf("%d members, want %d", len(ms), n)
	}
	slices.SortFunc(ms, func(a, b crawlv1alpha1.Proxy) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return ms, nil
}

// TestExitGeography: with the real operator, gateway and a proxy network
// (squid), a JSON echo's country lands in status.exitCountry and in the
// members' exit-country label (and kubectl get -o wide); +country-de
// through the gateway leaves from the DE member every time, and the lease
// API's acquire with country gets it too, or a 503 saying the country; a
// network session measured in another country than its {country} asked is
// re-rolled, with an ExitCountryMismatch event on it.
func TestExitGeography(t *testing.T) {
	t.Parallel()
	integration.Needs(t, "kube-apiserver and etcd from `make testenv`, squid from `make deps`")
	vendor := proxytest.StartVendorSquid(t, proxytest.VendorOptions{UsernamePattern: geoPattern, Password: vendorPassword, ExitIPs: 12})
	echo := startCountryEcho(t)
	pt := newPoolTest(t, "--providers=upstream")
	gw := pt.startGateway()
	pt.createCredentialsSecret("vendor", map[string]string{"password": vendorPassword})
	strategy := crawlv1alpha1.PoolStrategy{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}
	pt.create(&crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Name: "geo"},
		Spec: crawlv1alpha1.ProxyPoolSpec{Replicas: ptr.To[int32](2), Strategy: strategy,
			Template: crawlv1alpha1.ProxyTemplate{Spec: geoSpec(t, vendor.Addr, echo, geoPlainTemplate)}},
	})
	var geo []crawlv1alpha1.Proxy
	eventually.Check(t, 2*time.Minute, interval, "2 Ready members of pool geo with exit IPs", func(ctx context.Context) (err error) {
		geo, err = pt.readyWithExitIPs(ctx, "geo", 2)
		return err
	})
	de, us := geo[0], geo[1]
	echo.set(de.Status.ExitIP, "de") // the echo's case is not status's
	echo.set(us.Status.ExitIP, "US")
	eventually.Check(t, time.Minute, interval, "exitCountry and label DE and US", func(ctx context.Context) error {
		for name, want := range map[string]string{de.Name: "DE", us.Name: "US"} {
			p, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.ExitCountry != want || p.Labels[crawlv1alpha1.ExitCountryLabel] != want {
				return fmt.Errorf("%s: status.exitCountry %q, label %q; want %s", name, p.Status.ExitCountry, p.Labels[crawlv1alpha1.ExitCountryLabel], want)
			}
		}
		return nil
	})
	out, err := pt.kubectl(t.Context(), "get", "px", "-o", "wide", "-l", crawlv1alpha1.ExitCountryLabel+"=DE")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "EXIT-COUNTRY") || !strings.Contains(out, de.Name) || strings.Contains(out, us.Name) {
		t.Errorf("kubectl get px -o wide -l exit-country=DE:\n%s\nwant the Exit-Country column and %s alone", out, de.Name)
	}

	// Through the gateway, rotating: a new lease per request, each from DE.
	for i := range 6 {
		body, err := exec.CommandContext(t.Context(), "curl", "-sS", "--fail", "-m", "20", "-x", "http://ns-"+pt.ns+"+country-de:none@"+gw, echo.url+"/json").Output()
		var answer struct{ IP string }
		if err != nil || json.Unmarshal(body, &answer) != nil || answer.IP != de.Status.ExitIP {
			t.Errorf("request %d with +country-de: %q, %v; want it to leave from %s's %s", i, body, err, de.Name, de.Status.ExitIP)
		}
	}

	// The lease API's acquire.
	lc, err := client.New("http://" + pt.op.LeaseAddr)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lc.Acquire(t.Context(), client.AcquireRequest{Holder: "geo-test", Namespace: pt.ns, Country: "de"})
	if err != nil || l.Proxy.Name != de.Name {
		t.Errorf("acquire with country de: %+v, %v; want %s", l, err, de.Name)
	}
	if l != nil {
		if err := lc.Release(t.Context(), l.ID, client.OutcomeOK, ""); err != nil {
			t.Error(err)
		}
	}
	listed, err := lc.Proxies(t.Context(), pt.ns, crawlv1alpha1.PoolLabel+"=geo")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range listed {
		if want := map[string]string{de.Name: "DE", us.Name: "US"}[p.Name]; p.ExitCountry != want {
			t.Errorf("GET /v1/proxies: %s with exitCountry %q, want %q", p.Name, p.ExitCountry, want)
		}
	}
	var apiErr *client.Error
	if _, err := lc.Acquire(t.Context(), client.AcquireRequest{Holder: "geo-test", Namespace: pt.ns, Country: "FR"}); !errors.As(err, &apiErr) ||
		apiErr.StatusCode != http.StatusServiceUnavailable || !strings.Contains(apiErr.Message, "exit country FR") {
		t.Errorf("acquire with country FR: %v; want 503 saying the country", err)
	}

	// A network session that leaves from another country than it asked for.
	pt.create(&crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Name: "res"},
		Spec: crawlv1alpha1.ProxyPoolSpec{Replicas: ptr.To[int32](2), Strategy: strategy,
			Template: crawlv1alpha1.ProxyTemplate{Spec: geoSpec(t, vendor.Addr, echo, vendorTemplate)}},
	})
	var res []crawlv1alpha1.Proxy
	eventually.Check(t, 2*time.Minute, interval, "2 Ready members of pool res with exit IPs", func(ctx context.Context) (err error) {
		res, err = pt.readyWithExitIPs(ctx, "res", 2)
		return err
	})
	kept, victim := res[0], res[1]
	asked := (&upstream.Provider{}).AskedCountry(&victim)
	wrong := map[string]string{"DE": "US", "US": "DE"}[asked]
	echo.set(kept.Status.ExitIP, (&upstream.Provider{}).AskedCountry(&kept))
	echo.set(victim.Status.ExitIP, wrong)
	eventually.Check(t, 2*time.Minute, interval, victim.Name+" re-rolled for leaving from "+wrong, func(ctx context.Context) error {
		if _, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Get(ctx, victim.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s still there (%v)", victim.Name, err)
		}
		return nil
	})
	events, err := pt.kube.CoreV1().Events(pt.ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=ExitCountryMismatch"})
	if err != nil {
		t.Fatal(err)
	}
	if !eventSays(events.Items, victim.Name, "is in "+wrong+", but its network was asked for "+asked) {
		t.Errorf("no ExitCountryMismatch event on %s saying it is in %s, not %s; events: %+v", victim.Name, wrong, asked, events.Items)
	}
	if _, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Get(t.Context(), kept.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("%s, which leaves from the country it asked for: %v", kept.Name, err)
	}
	pt.noPasswordShown(t, vendorPassword, events.Items)
}

// TestExitCountryFromGeoIPDatabase: the operator started with
// --geoip-database (a real MaxMind DB file) fills status.exitCountry of a
// proxy whose echo answers only its address; a JSON echo that names a
// country wins over the database.
func TestExitCountryFromGeoIPDatabase(t *testing.T) {
	t.Parallel()
	integration.Needs(t, "kube-apiserver and etcd from `make testenv`, squid from `make deps`")
	vendor := proxytest.StartVendorSquid(t, proxytest.VendorOptions{UsernamePattern: geoPattern, Password: vendorPassword, ExitIPs: 4})
	db := geoiptest.WriteCountryDB(t, map[string]string{"127.0.9.0/24": "NL"})
	echo := startCountryEcho(t)
	for _, ip := range vendor.ExitIPs() {
		echo.set(ip, "DE")
	}
	pt := newPoolTest(t, "--providers=upstream", "--geoip-database="+db)
	pt.createCredentialsSecret("vendor", map[string]string{"password": vendorPassword})
	plain := upstreamSpec(t, vendor.Addr, echoServer(t), "vendor", geoPlainTemplate) // exitIPFromBody: the address alone
	plain.Upstream.Countries = nil
	for name, spec := range map[string]crawlv1alpha1.ProxySpec{"by-database": plain, "by-echo": geoSpec(t, vendor.Addr, echo, geoPlainTemplate)} {
		p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
		if _, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually.Check(t, 2*time.Minute, interval, "by-database in NL, by-echo in DE", func(ctx context.Context) error {
		for name, want := range map[string]string{"by-database": "NL", "by-echo": "DE"} {
			p, err := pt.crawl.CrawlV1alpha1().Proxies(pt.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != crawlv1alpha1.PhaseReady || p.Status.ExitIP == "" || p.Status.ExitCountry != want {
				return fmt.Errorf("%s: phase %s, exit IP %q, exit country %q; want %s", name, p.Status.Phase, p.Status.ExitIP, p.Status.ExitCountry, want)
			}
		}
		return nil
	})
}
