package gatewayintegration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/gateway"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// TestUnmarkedSecretNeverReachesTheUpstream: a Ready proxy whose spec.auth
// Secret is not marked for proxies (docs/decisions/0230-credentials-secrets-opt-in-by-label.md)
// serves no one. The gateway answers 503 and the lease API 500
// CredentialsUnavailable. Its upstream sits behind a relay that records
// every byte and receives none. Once the Secret is marked, both doors serve
// it and the password arrives.
func TestUnmarkedSecretNeverReachesTheUpstream(t *testing.T) {
	h := startHarness(t, "gw-unmarked", harnessOptions{})
	const password = "unmarked-secret-pw"
	relay := startRecordingRelay(t, proxytest.StartTinyproxy(t, proxytest.Options{Username: upstreamUser, Password: password}).Addr)
	unmarked := &upstream{name: "unmarked", proxy: &proxytest.Proxy{Impl: "relay", Addr: relay.addr}, password: password}
	host, port, _ := net.SplitHostPort(relay.addr)
	var portN int32
	fmt.Sscan(port, &portN)
	if _, err := h.kube.CoreV1().Secrets(h.ns).Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "unmarked-auth"},
		StringData: map[string]string{crawlv1alpha1.AuthUsernameKey: upstreamUser, crawlv1alpha1.AuthPasswordKey: password},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	obj, err := h.crawl.CrawlV1alpha1().Proxies(h.ns).Create(t.Context(), &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: unmarked.name, Labels: map[string]string{gateway.PoolLabel: "held"}},
		Spec: crawlv1alpha1.ProxySpec{
			Mode: crawlv1alpha1.ModeExternal, Endpoint: &crawlv1alpha1.Endpoint{Host: host, Port: portN}, MaxLeases: 1,
			Auth: &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: "unmarked-auth"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unmarked.obj = obj
	h.setPhase(t, unmarked, crawlv1alpha1.PhaseReady, 10)
	// A marked control, created after: once it serves, the Secret informer
	// (one watch, in order) holds the unmarked Secret too.
	control := h.fleet(t, "control", 1, false)
	token := h.crawler(t, "crawler", true)
	target := startTarget(t)
	if r := curl(t, h.gatewayURL("ns-gw-unmarked+pool-control", token), target.URL+"/echo?m=control"); r.status != http.StatusOK {
		t.Fatalf("the marked control: %d %q", r.status, r.body)
	}

	r := curl(t, h.gatewayURL("ns-gw-unmarked+pool-held", token), target.URL+"/echo?m=unmarked")
	if r.status != http.StatusServiceUnavailable {
		t.Errorf("gateway to the unmarked proxy: %d %q, want 503", r.status, r.body)
	}
	lc, err := client.New(h.leaseURL, client.WithToken(func(context.Context) (string, error) { return token, nil }))
	if err != nil {
		t.Fatal(err)
	}
	acquire := client.AcquireRequest{Holder: "t", Namespace: h.ns, Selector: gateway.PoolLabel + "=held"}
	var apiErr *client.Error
	if l, err := lc.Acquire(t.Context(), acquire); !errors.As(err, &apiErr) || apiErr.Code != "CredentialsUnavailable" {
		t.Errorf("lease API: %+v, %v; want 500 CredentialsUnavailable", l, err)
	}
	if n, got := relay.received(); n != 0 || bytes.Contains(got, []byte(password)) {
		t.Errorf("the upstream got %d connections (%d bytes) with its Secret unmarked, want none", n, len(got))
	}
	h.noCredentials(t, append(control, unmarked), r.body, r.verbose)

	// Marking heals both doors; the password now reaches the upstream.
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, crawlv1alpha1.ProxyCredentialsLabel)
	if _, err := h.kube.CoreV1().Secrets(h.ns).Patch(t.Context(), "unmarked-auth", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the gateway serves the marked proxy", func() bool {
		return curl(t, h.gatewayURL("ns-gw-unmarked+pool-held+session-s", token), target.URL+"/echo?m=marked").status == http.StatusOK
	})
	if _, got := relay.received(); !bytes.Contains(got, []byte("Proxy-Authorization: Basic")) {
		t.Errorf("the upstream received no credentials once the Secret was marked:\n%s", got)
	}
}

// recordingRelay forwards TCP connections to an upstream and records every
// byte clients send.
type recordingRelay struct {
	addr  string
	mu    sync.Mutex
	conns []net.Conn // every connection, both sides, closed at cleanup
	got   bytes.Buffer
}

func startRecordingRelay(t *testing.T, upstreamAddr string) *recordingRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recordingRelay{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstreamAddr)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, up)
			r.mu.Unlock()
			wg.Go(func() {
				_, _ = io.Copy(c, up)
				c.Close()
			})
			wg.Go(func() {
				_, _ = io.Copy(up, io.TeeReader(c, r))
				up.Close()
			})
		}
	})
	return r
}

func (r *recordingRelay) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got.Write(p)
}

// received is how many connections arrived and what they sent.
func (r *recordingRelay) received() (int, []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns) / 2, bytes.Clone(r.got.Bytes())
}
