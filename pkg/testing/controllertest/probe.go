package controllertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/health"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// WaitProvisioned waits until the Proxy's Provisioned condition is True.
func (h *Harness) WaitProvisioned(name string) *crawlv1alpha1.Proxy {
	h.T.Helper()
	var p *crawlv1alpha1.Proxy
	h.Eventually(30*time.Second, name+" provisioned", func() (bool, string) {
		p = h.Get(name)
		return meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned), fmt.Sprintf("conditions %+v", p.Status.Conditions)
	})
	return p
}

// ProbeReady fetches target's /echo (a proxytest target) through the proxy
// at the Proxy's status address, as the health engine would, reports the
// verdict, and waits for Ready: the cloud providers' tests run a real proxy
// where their fakes put an instance, and this shows the status leads there.
func (h *Harness) ProbeReady(name, target string) *crawlv1alpha1.Proxy {
	h.T.Helper()
	p := h.Get(name)
	addr := net.JoinHostPort(p.Status.IP, fmt.Sprint(p.Status.Port))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	res, err := proxytest.Fetch(ctx, &url.URL{Scheme: "http", Host: addr}, target+"/echo", nil)
	if err != nil || res.Status != http.StatusOK {
		h.T.Fatalf("request through %s: status %d, %v", addr, res.Status, err)
	}
	var echo proxytest.Echo
	if err := json.Unmarshal(res.Body, &echo); err != nil || len(echo.Header.Values("Via")) == 0 {
		h.T.Fatalf("the target saw no Via header (%v): the request did not go through the proxy: %s", err, res.Body)
	}
	h.Health.Set(h.Key(name), health.Verdict{Address: addr, Healthy: true, Message: "fetched through the proxy", Latency: time.Since(start), CheckedAt: time.Now()})
	var got *crawlv1alpha1.Proxy
	h.Eventually(20*time.Second, name+" Ready", func() (bool, string) {
		got = h.Get(name)
		return got.Status.Phase == crawlv1alpha1.PhaseReady, fmt.Sprintf("phase %q, conditions %+v", got.Status.Phase, got.Status.Conditions)
	})
	return got
}

// RequireGeneratedCredentials fails the test unless the proxy at the
// Proxy's status address lets a request to target's /echo through with the
// credentials of the Proxy's generated Secret, and refuses one without
// (407): the instance booted from the user-data the create gave it.
func (h *Harness) RequireGeneratedCredentials(created *crawlv1alpha1.Proxy, target string) {
	h.T.Helper()
	secret, err := h.Kube.CoreV1().Secrets(h.NS).Get(h.Ctx, proxyaccess.GeneratedCredentialsSecret(created), metav1.GetOptions{})
	if err != nil {
		h.T.Fatalf("the generated credentials Secret: %v", err)
	}
	p := h.Get(created.Name)
	fetch := func(user *url.Userinfo) (int, error) {
		proxyURL := &url.URL{Scheme: "http", User: user, Host: net.JoinHostPort(p.Status.IP, fmt.Sprint(p.Status.Port))}
		res, err := proxytest.Fetch(h.Ctx, proxyURL, target+"/echo", nil)
		return res.Status, err
	}
	if status, err := fetch(url.UserPassword(string(secret.Data["username"]), string(secret.Data["password"]))); err != nil || status != http.StatusOK {
		h.T.Fatalf("through the booted proxy with the generated credentials: %d, %v", status, err)
	}
	if status, _ := fetch(nil); status != http.StatusProxyAuthRequired {
		h.T.Errorf("without credentials: status %d, want 407", status)
	}
}
