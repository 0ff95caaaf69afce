package lease

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The request decoders turn bodies and queries into store requests. They are
// strict, and docs/api.md lists every form they accept and refuse:
//
//   - A body is one JSON object whose members are strings. Member names are
//     case-sensitive; an unknown, case-variant or repeated name, a null
//     (as the body or as a member), a value of another type, and anything
//     after the object are errors naming the member where there is one.
//   - A query is name=value pairs joined by '&', percent-encoded. A pair
//     that does not parse (a bad escape, a ';', no '='), an empty pair, an
//     unknown name and a repeated one are errors naming the parameter. A
//     call that takes no parameters refuses any.
//   - "name": "" and name= mean the same as leaving the member out, except
//     for durations, which must be valid when given.
//
// Errors are *FieldError; a body over the size limit surfaces as
// *http.MaxBytesError, and a body that could not be read as *bodyReadError.

// Length limits of free-form fields.
const (
	maxHolderLen  = 253
	maxSessionLen = 253
	maxDomainLen  = 253
)

// The members of POST /v1/leases and POST /v1/leases/{id}/renew.
var (
	acquireFields = []string{"holder", "namespace", "selector", "ttl", "domain", "session", "wait"}
	renewFields   = []string{"ttl"}
)

// bodyReadError: the body could not be read (the client was too slow, or
// went away). Its message names no socket address.
type bodyReadError struct {
	timeout bool
}

func (e *bodyReadError) Error() string {
	if e.timeout {
		return "the request body did not arrive in time"
	}
	return "the request body could not be read"
}

func decodeAcquire(body io.Reader) (AcquireRequest, error) {
	m, err := decodeObject(body, acquireFields, false)
	if err != nil {
		return AcquireRequest{}, err
	}
	req := AcquireRequest{Holder: m["holder"], Namespace: m["namespace"], Domain: NormalizeDomain(m["domain"]), Session: m["session"]}
	if err = validateText("holder", req.Holder, maxHolderLen, true); err != nil {
		return AcquireRequest{}, err
	}
	if err = validateNamespace("namespace", req.Namespace); err != nil {
		return AcquireRequest{}, err
	}
	if req.Selector, err = parseSelector("selector", m["selector"]); err != nil {
		return AcquireRequest{}, err
	}
	if req.TTL, err = parseTTL(m); err != nil {
		return AcquireRequest{}, err
	}
	if req.Wait, err = parseDuration("wait", m); err != nil {
		return AcquireRequest{}, err
	}
	if err = validateDomain("domain", req.Domain); err != nil {
		return AcquireRequest{}, err
	}
	if err = validateText("session", req.Session, maxSessionLen, false); err != nil {
		return AcquireRequest{}, err
	}
	return req, nil
}

func decodeRenew(body io.Reader) (time.Duration, error) {
	m, err := decodeObject(body, renewFields, true)
	if err != nil {
		return 0, err
	}
	return parseTTL(m)
}

// releaseQuery is DELETE /v1/leases/{id}?outcome=&domain=.
type releaseQuery struct {
	outcome Outcome
	domain  string
}

func decodeRelease(rawQuery string) (releaseQuery, error) {
	q, err := parseQuery(rawQuery, "outcome", "domain")
	if err != nil {
		return releaseQuery{}, err
	}
	return releaseFrom(q)
}

// releaseFrom reads outcome and domain of a parsed release query (the lease's
// or the session call's).
func releaseFrom(q map[string]string) (releaseQuery, error) {
	r := releaseQuery{outcome: Outcome(q["outcome"]), domain: NormalizeDomain(q["domain"])}
	switch r.outcome {
	case "":
		r.outcome = OutcomeOK
	case OutcomeOK, OutcomeBanned, OutcomeError:
	default:
		return releaseQuery{}, &FieldError{Field: "outcome", Message: fmt.Sprintf("must be one of ok, banned, error; got %q", truncate(string(r.outcome)))}
	}
	if err := validateDomain("domain", r.domain); err != nil {
		return releaseQuery{}, err
	}
	return r, nil
}

func decodeList(rawQuery string) (LeaseFilter, error) {
	q, err := parseQuery(rawQuery, "holder", "namespace")
	if err != nil {
		return LeaseFilter{}, err
	}
	f := LeaseFilter{Holder: q["holder"], Namespace: q["namespace"]}
	if err := validateText("holder", f.Holder, maxHolderLen, false); err != nil {
		return LeaseFilter{}, err
	}
	if err := validateNamespace("namespace", f.Namespace); err != nil {
		return LeaseFilter{}, err
	}
	return f, nil
}

// proxiesQuery is GET /v1/proxies?namespace=&selector=.
type proxiesQuery struct {
	namespace string
	selector  labels.Selector
}

func decodeProxies(rawQuery string) (proxiesQuery, error) {
	q, err := parseQuery(rawQuery, "namespace", "selector")
	if err != nil {
		return proxiesQuery{}, err
	}
	pq := proxiesQuery{namespace: q["namespace"]}
	if err := validateNamespace("namespace", pq.namespace); err != nil {
		return proxiesQuery{}, err
	}
	if pq.selector, err = parseSelector("selector", q["selector"]); err != nil {
		return proxiesQuery{}, err
	}
	return pq, nil
}

// decodeObject decodes one JSON object whose members are strings named in
// known, strictly (see the top of this file). It returns the members given.
// An empty body is an error unless allowEmpty.
//
// The body is read whole first (it is bounded by the server's limit) and
// the usual one, a flat object of known names and plain string values, is
// parsed by hand; anything else (escapes, an error of any kind, a read that
// failed) is decoded again by decodeObjectStream from the same bytes and
// the same read error, so that every answer but the fast one is exactly as
// before (decision 111).
func decodeObject(body io.Reader, known []string, allowEmpty bool) (map[string]string, error) {
	bp := bodyBuffers.Get().(*[]byte)
	b, readErr := readAll(body, (*bp)[:0])
	defer func() {
		if cap(b) <= 64<<10 {
			*bp = b[:0]
			bodyBuffers.Put(bp)
		}
	}()
	if readErr == nil {
		if m, ok := parsePlainObject(b, known); ok {
			return m, nil
		}
	}
	var r io.Reader = bytes.NewReader(b)
	if readErr != nil {
		r = io.MultiReader(r, errReader{readErr})
	}
	return decodeObjectStream(r, known, allowEmpty)
}

var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// readAll is io.ReadAll into b.
func readAll(r io.Reader, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// parsePlainObject parses b if it is one JSON object of distinct names
// from known whose values are strings without escapes or control
// characters, in valid UTF-8: what json.Unmarshal would make of it. ok is
// false for anything else, which decodeObjectStream then judges.
func parsePlainObject(b []byte, known []string) (members map[string]string, ok bool) {
	i := skipJSONSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return nil, false
	}
	members = make(map[string]string, len(known))
	i = skipJSONSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return members, skipJSONSpace(b, i+1) == len(b)
	}
	for {
		name, next, ok := plainJSONString(b, i)
		if !ok || !slices.Contains(known, string(name)) {
			return nil, false
		}
		if _, dup := members[string(name)]; dup {
			return nil, false
		}
		i = skipJSONSpace(b, next)
		if i == len(b) || b[i] != ':' {
			return nil, false
		}
		value, next, ok := plainJSONString(b, skipJSONSpace(b, i+1))
		if !ok || !utf8.Valid(value) {
			return nil, false
		}
		members[string(name)] = string(value)
		i = skipJSONSpace(b, next)
		switch {
		case i == len(b):
			return nil, false
		case b[i] == ',':
			i = skipJSONSpace(b, i+1)
		case b[i] == '}':
			return members, skipJSONSpace(b, i+1) == len(b)
		default:
			return nil, false
		}
	}
}

// plainJSONString reads the string starting at b[i] if it has no escapes
// and no control characters; next is the index after its closing quote.
func plainJSONString(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// decodeObjectStream is decodeObject through encoding/json's tokenizer.
func decodeObjectStream(body io.Reader, known []string, allowEmpty bool) (map[string]string, error) {
	dec := json.NewDecoder(body)
	tok, err := dec.Token()
	switch {
	case errors.Is(err, io.EOF):
		if allowEmpty {
			return map[string]string{}, nil
		}
		return nil, &FieldError{Message: "the request body is empty: want a JSON object"}
	case err != nil:
		return nil, jsonError(err)
	case tok == nil:
		return nil, &FieldError{Message: "the request body must be a JSON object, not null"}
	case tok != json.Delim('{'):
		return nil, &FieldError{Message: "the request body must be a JSON object"}
	}
	members := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonError(err)
		}
		name, _ := tok.(string) // inside an object, json.Decoder yields names as strings
		if !slices.Contains(known, name) {
			for _, k := range known {
				if strings.EqualFold(k, name) {
					return nil, &FieldError{Field: truncate(name), Message: fmt.Sprintf("is not a known field: names are case-sensitive, did you mean %q?", k)}
				}
			}
			return nil, &FieldError{Field: truncate(name), Message: fmt.Sprintf("is not a known field (known: %s)", strings.Join(known, ", "))}
		}
		if _, dup := members[name]; dup {
			return nil, &FieldError{Field: name, Message: "is given more than once"}
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, jsonError(err)
		}
		var v string
		if err := json.Unmarshal(raw, &v); err != nil || string(raw) == "null" {
			return nil, &FieldError{Field: name, Message: fmt.Sprintf("must be a %s, not %s", jsonTypeName(name), jsonKind(raw))}
		}
		members[name] = v
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooLarge *http.MaxBytesError
		var readErr *bodyReadError
		if err = jsonError(err); errors.As(err, &tooLarge) || errors.As(err, &readErr) {
			return nil, err
		}
		return nil, &FieldError{Message: "unexpected data after the JSON object"}
	}
	return members, nil
}

// jsonKind names the JSON type of a raw value, for messages.
func jsonKind(raw json.RawMessage) string {
	switch {
	case len(raw) == 0:
		return "nothing"
	case raw[0] == 'n':
		return "null"
	case raw[0] == 't' || raw[0] == 'f':
		return "a JSON boolean"
	case raw[0] == '{':
		return "a JSON object"
	case raw[0] == '[':
		return "a JSON array"
	case raw[0] == '"':
		return "a JSON string"
	}
	return "a JSON number"
}

// jsonError explains a decoding or reading error, naming no socket address.
func jsonError(err error) error {
	var (
		tooLarge  *http.MaxBytesError
		syntaxErr *json.SyntaxError
		netErr    net.Error
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tooLarge):
		return tooLarge
	case errors.As(err, &syntaxErr):
		return &FieldError{Message: fmt.Sprintf("malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &FieldError{Message: "malformed JSON: the body ends inside a value"}
	case errors.As(err, &netErr) && netErr.Timeout(), errors.Is(err, os.ErrDeadlineExceeded):
		return &bodyReadError{timeout: true}
	}
	return &bodyReadError{}
}

func jsonTypeName(field string) string {
	switch field {
	case "ttl", "wait":
		return `Go duration string such as "30s"`
	}
	return "string"
}

// parseQuery parses a raw query strictly (see the top of this file) into
// the parameters given, which must be among allowed.
func parseQuery(raw string, allowed ...string) (map[string]string, error) {
	q := map[string]string{}
	if raw == "" {
		return q, nil
	}
	known := "none"
	if len(allowed) > 0 {
		known = strings.Join(allowed, ", ")
	}
	for pair := range strings.SplitSeq(raw, "&") {
		rawName, rawValue, hasValue := strings.Cut(pair, "=")
		name, nameErr := url.QueryUnescape(rawName)
		if nameErr != nil {
			name = rawName
		}
		name = truncate(strings.ToValidUTF8(name, "\ufffd"))
		switch {
		case pair == "":
			return nil, &FieldError{Message: `the query has an empty parameter ("&&", or "&" at an end)`}
		case strings.Contains(pair, ";"):
			if i := strings.IndexAny(rawName, ";"); i >= 0 {
				name = truncate(rawName[:i])
			}
			return nil, &FieldError{Field: name, Message: `contains ";", which does not separate parameters: use "&" (and %3B for a literal ";")`}
		case nameErr != nil:
			return nil, &FieldError{Field: name, Message: "is not a valid percent-encoded parameter name"}
		case !hasValue:
			return nil, &FieldError{Field: name, Message: "has no value: write " + name + "=value"}
		}
		value, err := url.QueryUnescape(rawValue)
		switch {
		case err != nil:
			return nil, &FieldError{Field: name, Message: "has a value that is not validly percent-encoded"}
		case !slices.Contains(allowed, name):
			return nil, &FieldError{Field: name, Message: fmt.Sprintf("is not a known parameter (known: %s)", known)}
		}
		if _, dup := q[name]; dup {
			return nil, &FieldError{Field: name, Message: "is given more than once"}
		}
		q[name] = value
	}
	return q, nil
}

// parseDuration parses member field of m, 0 when absent.
func parseDuration(field string, m map[string]string) (time.Duration, error) {
	s, ok := m[field]
	if !ok {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, &FieldError{Field: field, Message: fmt.Sprintf("must be a Go duration string such as \"30s\" (omit %s for the default); got %q", field, truncate(s))}
	}
	if d < 0 {
		return 0, &FieldError{Field: field, Message: "must not be negative"}
	}
	return d, nil
}

// parseTTL is the ttl member: when given it must be positive (the store
// checks the bounds), so that "0s" is not silently the default.
func parseTTL(m map[string]string) (time.Duration, error) {
	d, err := parseDuration("ttl", m)
	if err == nil && d == 0 {
		if _, given := m["ttl"]; given {
			return 0, &FieldError{Field: "ttl", Message: "must be positive (omit ttl for the default)"}
		}
	}
	return d, err
}

func parseSelector(field, s string) (labels.Selector, error) {
	if s == "" {
		return labels.Everything(), nil
	}
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, &FieldError{Field: field, Message: "is not a label selector: " + truncate(err.Error())}
	}
	return sel, nil
}

func validateNamespace(field, ns string) error {
	if ns == "" {
		return nil
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return &FieldError{Field: field, Message: fmt.Sprintf("%q is not a namespace name: %s", truncate(ns), strings.Join(errs, "; "))}
	}
	return nil
}

// validateText accepts printable UTF-8 up to maxLen bytes.
func validateText(field, s string, maxLen int, required bool) error {
	switch {
	case s == "" && required:
		return &FieldError{Field: field, Message: "is required"}
	case len(s) > maxLen:
		return &FieldError{Field: field, Message: fmt.Sprintf("is longer than %d bytes", maxLen)}
	case !utf8.ValidString(s):
		return &FieldError{Field: field, Message: "is not valid UTF-8"}
	case strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }):
		return &FieldError{Field: field, Message: "must not contain control or non-printable characters"}
	}
	return nil
}

// validateDomain accepts host names, IPv4 and bracketed IPv6 addresses, with
// an optional port: a domain is a key, not something we resolve.
func validateDomain(field, d string) error {
	if len(d) > maxDomainLen {
		return &FieldError{Field: field, Message: fmt.Sprintf("is longer than %d bytes", maxDomainLen)}
	}
	for _, r := range d {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune(".-_:[]", r)) {
			return &FieldError{Field: field, Message: fmt.Sprintf("%q is not a domain name", truncate(d))}
		}
	}
	return nil
}

// truncate keeps echoed input short in error messages.
func truncate(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
