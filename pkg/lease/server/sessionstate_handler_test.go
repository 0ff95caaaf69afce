package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// FuzzSessionStatePut sends PUT /v1/sessions/s1/state with any query and
// body while s1 holds a lease for shop.example: the answer is 204 only
// for the lease's own domain, 400 for what the decoders refuse, never 5xx,
// and at most that one entry is ever kept.
func FuzzSessionStatePut(f *testing.F) {
	for _, seed := range []struct{ query, body string }{
		{"namespace=crawl&domain=shop.example", "jar"},
		{"namespace=crawl", "jar"},
		{"namespace=crawl&domain=SHOP.EXAMPLE.", ""},
		{"namespace=crawl&domain=evil.example", "jar"},
		{"namespace=crawl&domain=a%00b", "jar"},
		{"namespace=crawl&domain=%3Cscript%3E", "x"},
		{"namespace=Bad_NS&domain=shop.example", "x"},
		{"domain=shop.example&domain=shop.example", "x"},
		{"namespace=other&domain=shop.example", "x"},
		{"x=1", ""},
	} {
		f.Add(seed.query, []byte(seed.body))
	}
	ts := newTestServer(f)
	f.Fuzz(func(t *testing.T, rawQuery string, body []byte) {
		ts.t = t
		defer ts.releaseAll()
		ts.acquire(`{"holder":"w","namespace":"crawl","session":"s1","domain":"shop.example"}`)
		req := httptest.NewRequest(http.MethodPut, "/v1/sessions/s1/state", bytes.NewReader(body))
		req.URL.RawQuery = rawQuery
		req.Header.Set("Authorization", "Bearer "+goodToken)
		rec := httptest.NewRecorder()
		ts.handler.ServeHTTP(rec, req)
		checkAnswer(t, rec, nil, http.StatusNoContent, http.StatusBadRequest, http.StatusNotFound, http.StatusRequestEntityTooLarge)
		q, err := parseQuery(rawQuery, "namespace", "domain")
		var domain string
		if err == nil {
			domain, err = parseDomain("domain", q.get("domain"))
		}
		if rec.Code == http.StatusNoContent && (err != nil || (domain != "" && domain != "shop.example") || q.get("namespace") != "crawl") {
			t.Fatalf("query %q (decoded: %v) kept state: only the session's lease's own domain may", rawQuery, err)
		}
		if _, n := ts.store.StateUse(); n > 1 {
			t.Fatalf("%d entries kept: only the lease's (proxy, shop.example) may be", n)
		}
		// The entry kept, if any, is crawler's for the session's proxy and
		// shop.example: the session's next acquire joins its lease and is
		// handed exactly that entry.
		if _, n := ts.store.StateUse(); n == 1 {
			if joined := ts.acquire(`{"holder":"w","namespace":"crawl","session":"s1","domain":"shop.example"}`); len(joined.State) == 0 {
				t.Fatalf("query %q: the state kept is not crawler's for the session's proxy and shop.example", rawQuery)
			}
		}
	})
}

// TestSessionStatePutReadsTheDomainAsAcquireDoes: the session call takes
// only a domain acquire takes, with the same 400; a domain acquire takes
// (in another spelling) is the lease's own.
func TestSessionStatePutReadsTheDomainAsAcquireDoes(t *testing.T) {
	ts := newTestServer(t)
	ts.acquire(`{"holder":"w","namespace":"crawl","session":"s1","domain":"shop.example"}`)
	errorBody := func(status int, body []byte) wire.Error {
		t.Helper()
		var e wire.Error
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("%d %q: %v", status, body, err)
		}
		return e
	}
	for _, bad := range []string{"a\x00b", "a b", "<script>", strings.Repeat("a", 15<<10), "shop.example/x"} {
		quoted, _ := json.Marshal(bad)
		acq := ts.do(http.MethodPost, "/v1/leases", `{"holder":"w2","namespace":"crawl","domain":`+string(quoted)+`}`)
		put := ts.do(http.MethodPut, "/v1/sessions/s1/state?namespace=crawl&domain="+url.QueryEscape(bad), "jar")
		if acq.Code != http.StatusBadRequest || put.Code != acq.Code {
			t.Errorf("domain %.20q: acquire %d, session state %d; want both 400", bad, acq.Code, put.Code)
			continue
		}
		if diff := cmp.Diff(errorBody(acq.Code, acq.Body.Bytes()), errorBody(put.Code, put.Body.Bytes())); diff != "" {
			t.Errorf("domain %.20q: the session call's answer differs from acquire's (-acquire +put):\n%s", bad, diff)
		}
	}
	if _, got := ts.store.StateUse(); got != 0 {
		t.Errorf("%d entries kept after refused puts, want 0", got)
	}
	if rec := ts.do(http.MethodPut, "/v1/sessions/s1/state?namespace=crawl&domain=SHOP.Example.", "jar"); rec.Code != http.StatusNoContent {
		t.Errorf("the lease's own domain in another spelling: %d %s, want 204", rec.Code, rec.Body)
	}
}
