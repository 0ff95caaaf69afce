package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// Fuzz targets for every request decoder: whatever the input, nothing
// panics, the decoder either succeeds or returns a *FieldError (or the body
// limit's error), and the server answers garbage with 400 and a JSON error,
// never 5xx. Run one with, e.g.:
//
//	go test -run '^$' -fuzz '^FuzzAcquireBody$' -fuzztime 10s ./pkg/lease/server

// checkDecodeError fails unless err is nil or one the server answers 400/413.
func checkDecodeError(t *testing.T, err error) {
	t.Helper()
	var field *store.FieldError
	var tooLarge *http.MaxBytesError
	if err != nil && !errors.As(err, &field) && !errors.As(err, &tooLarge) {
		t.Fatalf("decoder returned %T %v, want a *FieldError", err, err)
	}
}

// checkAnswer fails unless the status is one of allowed, a 400 follows a
// decoder error, and every error is a JSON error body.
func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder, decodeErr error, allowed ...int) {
	t.Helper()
	if !slices.Contains(allowed, rec.Code) {
		t.Fatalf("status %d (%s), want one of %v", rec.Code, rec.Body, allowed)
	}
	if decodeErr != nil && rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("the decoder failed (%v) but the server answered %d", decodeErr, rec.Code)
	}
	if rec.Code < 300 {
		return
	}
	var e wire.Error
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("error answer %d is not a JSON error: %q (%v)", rec.Code, rec.Body, err)
	}
	if rec.Code == http.StatusBadRequest && e.Error.Code != wire.CodeInvalid {
		t.Fatalf("400 with code %q", e.Error.Code)
	}
}

// releaseAll gives every lease back, so that each fuzz input starts alike.
func (ts *testServer) releaseAll() {
	leases, _ := ts.store.List(store.LeaseFilter{})
	for _, l := range leases {
		_ = ts.store.ReleaseAs(l.Owner, l.ID, store.OutcomeOK, "", store.Report{})
	}
}

func FuzzAcquireBody(f *testing.F) {
	for _, seed := range []string{
		`{"holder":"w"}`,
		`{"holder":"w","namespace":"crawl","selector":"tier in (a,b),!slow","ttl":"30s","domain":"example.com","session":"s","wait":"0s"}`,
		`{"holder":"w","ttl":"1h"}`,
		`{"holder":"w","ttl":30}`,
		`{"holder":"w","x":1}`,
		`{"holder":"w"} trailing`,
		`{"holder":null}`,
		`null`,
		`[]`,
		`{"holder":"\u0000"}`,
		`{"holder":"w","selector":"a=b=c"}`,
		`{"holder":"w","wait":"-1s"}`,
		`{"HOLDER":"w"}`,
		`{"holder":"w","holder":"x"}`,
		`{"holder":"w","ttl":"0s"}`,
		`{"holder":"w","ttl":""}`,
		``,
		`{`,
	} {
		f.Add([]byte(seed))
	}
	ts := newTestServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		_, decodeErr := decodeAcquire(bytes.NewReader(body))
		checkDecodeError(t, decodeErr)
		ts.t = t
		rec := ts.do(http.MethodPost, "/v1/leases", string(body))
		checkAnswer(t, rec, decodeErr, http.StatusCreated, http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusServiceUnavailable)
		ts.releaseAll()
	})
}

func FuzzRenewBody(f *testing.F) {
	for _, seed := range []string{``, `{}`, `{"ttl":"30s"}`, `{"ttl":"1ns"}`, `{"ttl":1}`, `{"ttl":"30s","holder":"x"}`, `{} {}`, `"30s"`, `{"ttl":"9223372036854775807ns"}`} {
		f.Add([]byte(seed))
	}
	ts := newTestServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		_, decodeErr := decodeRenew(bytes.NewReader(body))
		checkDecodeError(t, decodeErr)
		ts.t = t
		l := ts.acquire(`{"holder":"w"}`)
		rec := ts.do(http.MethodPost, "/v1/leases/"+l.ID+"/renew", string(body))
		checkAnswer(t, rec, decodeErr, http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge)
		ts.releaseAll()
	})
}

func FuzzReleaseQuery(f *testing.F) {
	for _, seed := range []string{"", "outcome=ok", "outcome=banned&domain=example.com", "outcome=banned", "outcome=error&domain=", "outcome=x", "outcome=ok&outcome=ok", "domain=%zz", "a=b", "domain=a%20b", ";;&&==", "outcome=banned;domain=example.com", "outcome", "outcome=ok&", "%zz=1"} {
		f.Add(seed)
	}
	ts := newTestServer(f)
	f.Fuzz(func(t *testing.T, rawQuery string) {
		_, decodeErr := decodeRelease(rawQuery)
		checkDecodeError(t, decodeErr)
		ts.t = t
		l := ts.acquire(`{"holder":"w"}`)
		rec := ts.doRaw(http.MethodDelete, "/v1/leases/"+l.ID, rawQuery)
		// A banned release without a domain is refused by the store, also 400.
		checkAnswer(t, rec, decodeErr, http.StatusNoContent, http.StatusBadRequest)
		ts.releaseAll()
	})
}

func FuzzListQuery(f *testing.F) {
	for _, seed := range []string{"", "holder=w", "namespace=crawl", "holder=w&namespace=crawl", "namespace=Bad_NS", "holder=%00", "x=1", "holder=a&holder=b"} {
		f.Add(seed)
	}
	ts := newTestServer(f)
	f.Fuzz(func(t *testing.T, rawQuery string) {
		_, decodeErr := decodeList(rawQuery)
		checkDecodeError(t, decodeErr)
		ts.t = t
		checkAnswer(t, ts.doRaw(http.MethodGet, "/v1/leases", rawQuery), decodeErr, http.StatusOK, http.StatusBadRequest)
	})
}

func FuzzProxiesQuery(f *testing.F) {
	for _, seed := range []string{"", "namespace=crawl", "selector=tier%3Da", "selector=tier+in+(a,b)", "selector=%3D%3D", "selector=!a,b!=c", "namespace=-", "y=2"} {
		f.Add(seed)
	}
	ts := newTestServer(f)
	f.Fuzz(func(t *testing.T, rawQuery string) {
		_, decodeErr := decodeProxies(rawQuery)
		checkDecodeError(t, decodeErr)
		ts.t = t
		checkAnswer(t, ts.doRaw(http.MethodGet, "/v1/proxies", rawQuery), decodeErr, http.StatusOK, http.StatusBadRequest)
	})
}

// doRaw calls the handler with a raw query string, which may be anything a
// client can send.
func (ts *testServer) doRaw(method, path, rawQuery string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	req.URL.RawQuery = rawQuery
	req.Header.Set("Authorization", "Bearer "+goodToken)
	rec := httptest.NewRecorder()
	ts.handler.ServeHTTP(rec, req)
	return rec
}

// FuzzLeaseID mutates a valid lease ID (a byte replaced, inserted or
// removed at a position): unless the result is byte-identical to the ID,
// it names no lease, on every call that takes an ID.
func FuzzLeaseID(f *testing.F) {
	for _, seed := range []struct {
		pos uint16
		b   byte
		op  uint8
	}{{0, 'A', 0}, {5, '_', 0}, {65535, 'B', 0}, {65535, 'A', 0}, {10, '\n', 1}, {20, 'x', 1}, {0, 0, 2}, {65535, 0, 2}, {3, '%', 1}, {65535, '=', 1}} {
		f.Add(seed.pos, seed.b, seed.op)
	}
	ts := newTestServer(f)
	f.Fuzz(func(t *testing.T, pos uint16, b byte, op uint8) {
		ts.t = t
		l := ts.acquire(`{"holder":"w","domain":"example.com"}`)
		defer ts.releaseAll()
		id := []byte(l.ID)
		i := int(pos) % len(id)
		switch op % 3 {
		case 0: // replace
			id[i] = b
		case 1: // insert
			id = append(id[:i], append([]byte{b}, id[i:]...)...)
		case 2: // remove
			id = append(id[:i], id[i+1:]...)
		}
		mutated := string(id)
		if mutated == l.ID {
			return
		}
		owner := "crawler"
		if _, err := ts.store.GetAs(owner, mutated); err != store.ErrUnknownLease {
			t.Fatalf("GetAs(%q), a mutation of %q: err = %v, want ErrUnknownLease", mutated, l.ID, err)
		}
		if _, err := ts.store.RenewAs(owner, mutated, 0, store.Report{}); err != store.ErrUnknownLease {
			t.Fatalf("RenewAs(%q): err = %v, want ErrUnknownLease", mutated, err)
		}
		for _, outcome := range []store.Outcome{store.OutcomeBanned, store.OutcomeOK} { // the whole ID, and its head
			if err := ts.store.ReleaseAs(owner, mutated, outcome, "", store.Report{}); err != store.ErrUnknownLease {
				t.Fatalf("ReleaseAs(%q, %s): err = %v, want ErrUnknownLease", mutated, outcome, err)
			}
		}
		// Over HTTP the path carries it escaped.
		rec := ts.do(http.MethodGet, "/v1/leases/"+url.PathEscape(mutated), "")
		if rec.Code != http.StatusNotFound && rec.Code != http.StatusBadRequest {
			t.Fatalf("GET of the mutation %q: %d %s, want 404", mutated, rec.Code, rec.Body)
		}
		if _, err := ts.store.GetAs(owner, l.ID); err != nil {
			t.Fatalf("the original id after its mutations: %v", err)
		}
	})
}

// FuzzNoQueryCalls: acquire, renew and get take no query parameters; any
// query but the empty one is a 400, and nothing happens.
func FuzzNoQueryCalls(f *testing.F) {
	for _, seed := range []string{"", "a", "a=b", "wait=10s", "ttl=1m", "%zz", ";", "&", "=", "a=1&a=2", "holder=w"} {
		f.Add(seed)
	}
	ts := newTestServer(f)
	f.Fuzz(func(t *testing.T, rawQuery string) {
		ts.t = t
		defer ts.releaseAll()
		_, parseErr := parseQuery(rawQuery)
		checkDecodeError(t, parseErr)
		if (parseErr == nil) != (rawQuery == "") {
			t.Fatalf("parseQuery(%q) with nothing allowed: err = %v", rawQuery, parseErr)
		}
		l := ts.acquire(`{"holder":"w"}`)
		want := http.StatusOK
		if rawQuery != "" {
			want = http.StatusBadRequest
		}
		for _, call := range []struct{ method, path string }{
			{http.MethodGet, "/v1/leases/" + l.ID},
			{http.MethodPost, "/v1/leases/" + l.ID + "/renew"},
		} {
			rec := ts.doRaw(call.method, call.path, rawQuery)
			checkAnswer(t, rec, parseErr, want)
		}
		req := httptest.NewRequest(http.MethodPost, "/v1/leases", strings.NewReader(`{"holder":"w"}`))
		req.URL.RawQuery = rawQuery
		req.Header.Set("Authorization", "Bearer "+goodToken)
		rec := httptest.NewRecorder()
		ts.handler.ServeHTTP(rec, req)
		checkAnswer(t, rec, parseErr, map[bool]int{true: http.StatusCreated, false: http.StatusBadRequest}[rawQuery == ""])
	})
}
