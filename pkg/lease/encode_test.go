package lease

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// encodingJSON is what the API wrote for a lease before appendLeaseJSON.
func encodingJSON(t *testing.T, l *wire.Lease) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(l); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestAppendLeaseJSONIsEncodingJSON(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 18, 0, 0, 123456789, time.UTC)
	tests := []struct {
		name  string
		lease wire.Lease
	}{
		{"empty", wire.Lease{}},
		{"usual grant", wire.Lease{
			ID: "AgGb0Z8-abc_DEF", Holder: "worker-1",
			Proxy: wire.ProxyRef{Namespace: "crawl", Name: "p1", URL: "http://127.0.0.1:3128", LatencyMillis: 12},
			TTL:   "1m0s", GrantedAt: t0, ExpiresAt: t0.Add(time.Minute),
		}},
		{"credentials, session and domain", wire.Lease{
			ID: "x", Holder: "h", Credentials: &wire.Credentials{Username: "u", Password: `p"\w<>&`},
			Session: "s-1", Domain: "example.com", TTL: "30s",
			GrantedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), ExpiresAt: time.Date(2026, 1, 2, 3, 4, 5, 500000000, time.UTC),
		}},
		{"escapes", wire.Lease{
			Holder:  "tab\tnl\nquote\"back\\slash<tag>&amp;\u2028\u2029\x00\x1f\x7f",
			Session: "ünïcödé 日本 \xff\xfe bad utf-8", Domain: "\b\f\r",
			Proxy: wire.ProxyRef{LatencyMillis: -5},
		}},
		{"every byte, alone and in a row", wire.Lease{Holder: everyByte(), Session: "x\x00y\x80z\xffw"}},
		{"other zones", wire.Lease{
			GrantedAt: time.Date(2026, 6, 1, 12, 0, 0, 1, time.FixedZone("x", 5*3600+1800)),
			ExpiresAt: time.Date(1, 1, 1, 0, 0, 0, 0, time.FixedZone("y", -3600)),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(encodingJSON(t, &tt.lease), string(appendLeaseJSON(nil, &tt.lease))); diff != "" {
				t.Errorf("appendLeaseJSON differs from encoding/json (-want +got):\n%s", diff)
			}
		})
	}
}

// everyByte is the 256 byte values in order.
func everyByte() string {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return string(b)
}

// TestAppendLeaseJSONRandomStrings compares the string encoding on random
// bytes, weighted towards the ones that need escaping.
func TestAppendLeaseJSONRandomStrings(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 16))
	special := []byte("\"\\<>&\x00\x01\x1f\x7f\n\r\t\xe2\x80\xa8\xa9\xff\xc3\xa9")
	randomString := func() string {
		b := make([]byte, rng.IntN(24))
		for i := range b {
			if rng.IntN(2) == 0 {
				b[i] = special[rng.IntN(len(special))]
			} else {
				b[i] = byte(rng.IntN(256))
			}
		}
		return string(b)
	}
	for range 2000 {
		l := wire.Lease{ID: randomString(), Holder: randomString(), Session: randomString(), Domain: randomString(), TTL: randomString(),
			Proxy:     wire.ProxyRef{Namespace: randomString(), Name: randomString(), URL: randomString(), LatencyMillis: rng.Int64()},
			GrantedAt: time.Unix(0, rng.Int64N(1<<62)).UTC(), ExpiresAt: time.Unix(rng.Int64N(1<<34), 0).UTC()}
		if want, got := encodingJSON(t, &l), string(appendLeaseJSON(nil, &l)); want != got {
			t.Fatalf("appendLeaseJSON(%#v):\n got %q\nwant %q", l, got, want)
		}
	}
}
