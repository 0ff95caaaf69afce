package proxytest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"
)

// maxBody bounds the response bodies Fetch keeps.
const maxBody = 1 << 20

// Result is what Fetch saw.
type Result struct {
	// ConnectStatus and ConnectHeader are the proxy's answer to CONNECT
	// (https targets only; 0 and nil for http).
	ConnectStatus int
	ConnectHeader http.Header
	// Status, Header and Body are the final response: the target's, or the
	// proxy's own for plain HTTP errors. Status is 0 when there was none
	// (a refused CONNECT, a broken connection).
	Status int
	Header http.Header
	Body   []byte
}

// Fetch GETs target through the proxy at proxyURL (credentials in its
// userinfo) on a fresh connection, the way a crawler's Go client does:
// absolute-form requests for http targets, CONNECT then TLS (trusting
// roots) for https ones. The error is that of the request, if any; Result
// holds whatever was received before it, notably the CONNECT response.
func Fetch(ctx context.Context, proxyURL *url.URL, target string, roots *x509.CertPool) (Result, error) {
	var (
		mu  sync.Mutex
		res Result
	)
	tr := &http.Transport{
		Proxy:             http.ProxyURL(proxyURL),
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DisableKeepAlives: true,
		OnProxyConnectResponse: func(_ context.Context, _ *url.URL, _ *http.Request, resp *http.Response) error {
			mu.Lock()
			defer mu.Unlock()
			res.ConnectStatus = resp.StatusCode
			res.ConnectHeader = resp.Header.Clone()
			return nil
		},
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return Result{}, err
	}
	resp, err := client.Do(req)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	res.Header = resp.Header
	res.Body, err = io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return res, fmt.Errorf("reading body: %w", err)
	}
	return res, nil
}

// FetchCase is one request through a proxy and what must come of it: the
// status of the target's answer, or (WantConnect) the proxy's answer to
// CONNECT for an https target.
type FetchCase struct {
	Proxy       *url.URL
	Target      string
	WantStatus  int
	WantConnect int
}

// CheckFetches runs each case as a subtest, with roots trusted for https
// targets: the docs tests' tables of what a documented proxy admits.
func CheckFetches(t *testing.T, cases map[string]FetchCase, roots *x509.CertPool) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := Fetch(ctx, tc.Proxy, tc.Target, roots)
			if tc.WantConnect != 0 {
				if res.ConnectStatus != tc.WantConnect {
					t.Errorf("CONNECT status %d (%v), want %d", res.ConnectStatus, err, tc.WantConnect)
				}
				return
			}
			if err != nil || res.Status != tc.WantStatus {
				t.Errorf("status %d (%v), want %d", res.Status, err, tc.WantStatus)
			}
		})
	}
}
