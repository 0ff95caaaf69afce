package lease

import (
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
)

// The lease API's hot responses (a grant, a renewal) are written by hand
// into a pooled buffer, byte for byte what encoding/json's Encoder writes
// for wire.Lease (encode_test.go compares the two), in one Write: the
// reflection-driven encoder was the largest part of a grant's CPU after
// the store's own (docs/benchmarks.md, Lease API; decision 111). Every
// other response still goes through encoding/json.

var jsonBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// Shared header values: assigning them skips Header.Set's canonicalising
// and its one-element slice per call. net/http only reads them.
var (
	headerJSON    = []string{"application/json"}
	headerNoStore = []string{"no-store"}
)

// writeLeaseJSON answers status with l, as writeJSON would.
func writeLeaseJSON(w http.ResponseWriter, status int, l *wire.Lease) {
	h := w.Header()
	h["Content-Type"] = headerJSON
	h["Cache-Control"] = headerNoStore
	w.WriteHeader(status)
	bp := jsonBuffers.Get().(*[]byte)
	b := appendLeaseJSON((*bp)[:0], l)
	// The client may be gone; there is nobody to tell.
	_, _ = w.Write(b)
	if cap(b) <= 64<<10 {
		*bp = b[:0]
		jsonBuffers.Put(bp)
	}
}

// appendLeaseJSON appends what json.NewEncoder(w).Encode(l) writes,
// including the final newline.
func appendLeaseJSON(b []byte, l *wire.Lease) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, l.ID)
	b = append(b, `,"holder":`...)
	b = appendJSONString(b, l.Holder)
	b = append(b, `,"proxy":{"namespace":`...)
	b = appendJSONString(b, l.Proxy.Namespace)
	b = append(b, `,"name":`...)
	b = appendJSONString(b, l.Proxy.Name)
	b = append(b, `,"url":`...)
	b = appendJSONString(b, l.Proxy.URL)
	b = append(b, `,"latencyMillis":`...)
	b = strconv.AppendInt(b, l.Proxy.LatencyMillis, 10)
	b = append(b, '}')
	if c := l.Credentials; c != nil {
		b = append(b, `,"credentials":{"username":`...)
		b = appendJSONString(b, c.Username)
		b = append(b, `,"password":`...)
		b = appendJSONString(b, c.Password)
		b = append(b, '}')
	}
	if l.Session != "" {
		b = append(b, `,"session":`...)
		b = appendJSONString(b, l.Session)
	}
	if l.Domain != "" {
		b = append(b, `,"domain":`...)
		b = appendJSONString(b, l.Domain)
	}
	b = append(b, `,"ttl":`...)
	b = appendJSONString(b, l.TTL)
	b = append(b, `,"grantedAt":`...)
	b = appendJSONTime(b, l.GrantedAt)
	b = append(b, `,"expiresAt":`...)
	b = appendJSONTime(b, l.ExpiresAt)
	return append(b, "}\n"...)
}

// appendJSONTime is time.Time's MarshalJSON (RFC 3339 with nanoseconds,
// trailing zeros dropped) for the years it accepts.
func appendJSONTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// jsonSafe[c] says appendJSONString copies byte c as it is: printable
// ASCII but for what encoding/json escapes. One lookup instead of six
// comparisons a byte: the lease ID alone is over a hundred (decision 158).
var jsonSafe = func() (safe [256]bool) {
	for c := byte(0x20); c < utf8.RuneSelf; c++ {
		safe[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return safe
}()

// appendJSONString is encoding/json's string encoding with HTML escaping
// (the Encoder's default): quotes, backslashes and control characters
// escaped, <, > and & as \u003c, \u003e and \u0026, U+2028 and U+2029
// escaped, and invalid UTF-8 replaced by \ufffd.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if jsonSafe[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
