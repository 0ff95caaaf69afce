package gatewayintegration

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// TestSessionStateOverTheAPI, with the Go client over HTTP: a worker keeps
// its cookie jar under its lease; a second worker that later gets the same
// proxy for the same domain receives it; a third on the other proxy gets
// none; a blob over 64 KiB is a 413 that names the cap; the jar is never
// in the logs.
func TestSessionStateOverTheAPI(t *testing.T) {
	h := startHarness(t, "gw-state", harnessOptions{})
	for _, name := range []string{"state-a", "state-b"} {
		h.addUpstream(t, name, "crawl", proxytest.StartInProcess(t, proxytest.Options{}), "", "", 10)
	}
	token := h.crawler(t, "crawler", true)
	lc, err := client.New(h.leaseURL, client.WithToken(func(context.Context) (string, error) { return token, nil }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	jar := []byte(`[{"name":"sid","value":"s3cr3t-cookie-7731","domain":"shop.example"}]`)
	acquire := func(holder string) *client.Lease {
		t.Helper()
		l, err := lc.Acquire(ctx, client.AcquireRequest{Holder: holder, Namespace: h.ns, Domain: "shop.example", Session: "worker-slot-1", Wait: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	first := acquire("worker-1")
	if first.State != nil {
		t.Fatalf("a first grant carries state %q", first.State)
	}
	if err := lc.PutState(ctx, first.ID, jar); err != nil {
		t.Fatal(err)
	}
	var apiErr *client.Error
	err = lc.PutState(ctx, first.ID, bytes.Repeat([]byte("x"), 64<<10+1))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(apiErr.Message, "65536") {
		t.Errorf("a state over the cap: %v; want 413 naming 65536 bytes", err)
	}
	if err := lc.Release(ctx, first.ID, client.OutcomeOK, ""); err != nil {
		t.Fatal(err)
	}

	// The session brings the next worker back to the same proxy.
	second := acquire("worker-2")
	if second.Proxy.Name != first.Proxy.Name || !bytes.Equal(second.State, jar) {
		t.Errorf("second grant: proxy %s with state %q; want %s with the jar", second.Proxy.Name, second.State, first.Proxy.Name)
	}
	// Meanwhile a worker of another session gets the other proxy, and no jar.
	third, err := lc.Acquire(ctx, client.AcquireRequest{Holder: "worker-3", Namespace: h.ns, Domain: "shop.example", Session: "worker-slot-2"})
	if err != nil {
		t.Fatal(err)
	}
	if third.Proxy.Name == first.Proxy.Name || third.State != nil {
		t.Errorf("third grant: proxy %s with state %q; want the other proxy and none", third.Proxy.Name, third.State)
	}
	if strings.Contains(h.logs.String(), "s3cr3t-cookie") {
		t.Error("the session state appears in the lease API's logs")
	}
}
