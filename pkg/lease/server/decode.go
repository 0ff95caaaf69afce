package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/proxyfleet/proxy-operator/pkg/hostrule"
	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
	"github.com/proxyfleet/proxy-operator/pkg/names"
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
	acquireFields = []string{"holder", "namespace", "selector", "ttl", "domain", "session", "wait", "country"}
	renewFields   = []string{"ttl", "okRequests", "transferredBytes"}
	// The parameters of each query that takes any.
	releaseParams = []string{"outcome", "domain", "transferredBytes"}
	listParams    = []string{"holder", "namespace"}
	proxiesParams = []string{"namespace", "selector"}
	sessionParams = []string{"namespace", "outcome", "domain"}
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

func decodeAcquire(body io.Reader) (store.AcquireRequest, error) {
	m, err := decodeObject(body, acquireFields, false)
	if err != nil {
		return store.AcquireRequest{}, err
	}
	req := store.AcquireRequest{Holder: m.get("holder"), Namespace: m.get("namespace"), Session: m.get("session")}
	if err = validateText("holder", req.Holder, maxHolderLen, true); err != nil {
		return store.AcquireRequest{}, err
	}
	if err = validateNamespace("namespace", req.Namespace); err != nil {
		return store.AcquireRequest{}, err
	}
	if req.Selector, err = parseSelector("selector", m.get("selector")); err != nil {
		return store.AcquireRequest{}, err
	}
	if req.TTL, err = parseTTL(&m); err != nil {
		return store.AcquireRequest{}, err
	}
	if req.Wait, err = parseDuration("wait", &m); err != nil {
		return store.AcquireRequest{}, err
	}
	if req.Domain, err = parseDomain("domain", m.get("domain")); err != nil {
		return store.AcquireRequest{}, err
	}
	if err = validateText("session", req.Session, maxSessionLen, false); err != nil {
		return store.AcquireRequest{}, err
	}
	if req.Country, err = parseCountry("country", m.get("country")); err != nil {
		return store.AcquireRequest{}, err
	}
	return req, nil
}

// renewRequest is POST /v1/leases/{id}/renew's body.
type renewRequest struct {
	ttl    time.Duration
	report store.Report
}

func decodeRenew(body io.Reader) (renewRequest, error) {
	m, err := decodeObject(body, renewFields, true)
	if err != nil {
		return renewRequest{}, err
	}
	var r renewRequest
	if r.ttl, err = parseTTL(&m); err != nil {
		return renewRequest{}, err
	}
	if r.report.TransferredBytes, err = parseCount("transferredBytes", m.get("transferredBytes"), store.MaxTransferredReport); err != nil {
		return renewRequest{}, err
	}
	if r.report.OKRequests, err = parseCount("okRequests", m.get("okRequests"), store.MaxOKRequestsReport); err != nil {
		return renewRequest{}, err
	}
	return r, nil
}

// releaseQuery is DELETE /v1/leases/{id}?outcome=&domain=&transferredBytes=.
type releaseQuery struct {
	outcome     store.Outcome
	domain      string
	transferred int64
}

func decodeRelease(rawQuery string) (releaseQuery, error) {
	q, err := parseQuery(rawQuery, releaseParams...)
	if err != nil {
		return releaseQuery{}, err
	}
	r, err := releaseFrom(&q)
	if err != nil {
		return releaseQuery{}, err
	}
	if r.transferred, err = parseCount("transferredBytes", q.get("transferredBytes"), store.MaxTransferredReport); err != nil {
		return releaseQuery{}, err
	}
	return r, nil
}

// parseCount reads a decimal count, 0..most, of the member field.
func parseCount(field, v string, most int64) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > most {
		return 0, &store.FieldError{Field: field, Message: fmt.Sprintf("must be a decimal count, 0..%d; got %q", most, truncate(v))}
	}
	return n, nil
}

// releaseFrom reads outcome and domain of a parsed release query (the lease's
// or the session call's).
func releaseFrom(q *members) (releaseQuery, error) {
	r := releaseQuery{outcome: store.Outcome(q.get("outcome"))}
	switch r.outcome {
	case "":
		r.outcome = store.OutcomeOK
	case store.OutcomeOK, store.OutcomeBanned, store.OutcomeError:
	default:
		return releaseQuery{}, &store.FieldError{Field: "outcome", Message: fmt.Sprintf("must be one of ok, banned, error; got %q", truncate(string(r.outcome)))}
	}
	var err error
	if r.domain, err = parseDomain("domain", q.get("domain")); err != nil {
		return releaseQuery{}, err
	}
	return r, nil
}

func decodeList(rawQuery string) (store.LeaseFilter, error) {
	q, err := parseQuery(rawQuery, listParams...)
	if err != nil {
		return store.LeaseFilter{}, err
	}
	f := store.LeaseFilter{Holder: q.get("holder"), Namespace: q.get("namespace")}
	if err := validateText("holder", f.Holder, maxHolderLen, false); err != nil {
		return store.LeaseFilter{}, err
	}
	if err := validateNamespace("namespace", f.Namespace); err != nil {
		return store.LeaseFilter{}, err
	}
	return f, nil
}

// proxiesQuery is GET /v1/proxies?namespace=&selector=.
type proxiesQuery struct {
	namespace string
	selector  labels.Selector
}

func decodeProxies(rawQuery string) (proxiesQuery, error) {
	q, err := parseQuery(rawQuery, proxiesParams...)
	if err != nil {
		return proxiesQuery{}, err
	}
	pq := proxiesQuery{namespace: q.get("namespace")}
	if err := validateNamespace("namespace", pq.namespace); err != nil {
		return proxiesQuery{}, err
	}
	if pq.selector, err = parseSelector("selector", q.get("selector")); err != nil {
		return proxiesQuery{}, err
	}
	return pq, nil
}

// decodeObject decodes one JSON object whose members are strings named in
// known, strictly (see the top of this file), with encoding/json's
// tokenizer: a name is checked when it is read, so an error names it. It
// returns the members given. An empty body is an error unless allowEmpty.
func decodeObject(body io.Reader, known []string, allowEmpty bool) (members, error) {
	dec := json.NewDecoder(body)
	tok, err := dec.Token()
	switch {
	case errors.Is(err, io.EOF):
		if allowEmpty {
			return members{}, nil
		}
		return members{}, &store.FieldError{Message: "the request body is empty: want a JSON object"}
	case err != nil:
		return members{}, jsonError(err)
	case tok == nil:
		return members{}, &store.FieldError{Message: "the request body must be a JSON object, not null"}
	case tok != json.Delim('{'):
		return members{}, &store.FieldError{Message: "the request body must be a JSON object"}
	}
	var m members
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return members{}, jsonError(err)
		}
		name, _ := tok.(string) // inside an object, json.Decoder yields names as strings
		if !slices.Contains(known, name) {
			for _, k := range known {
				if strings.EqualFold(k, name) {
					return members{}, &store.FieldError{Field: truncate(name), Message: fmt.Sprintf("is not a known field: names are case-sensitive, did you mean %q?", k)}
				}
			}
			return members{}, &store.FieldError{Field: truncate(name), Message: fmt.Sprintf("is not a known field (known: %s)", strings.Join(known, ", "))}
		}
		if _, dup := m.lookup(name); dup {
			return members{}, &store.FieldError{Field: name, Message: "is given more than once"}
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return members{}, jsonError(err)
		}
		var v string
		if err := json.Unmarshal(raw, &v); err != nil || string(raw) == "null" {
			return members{}, &store.FieldError{Field: name, Message: fmt.Sprintf("must be a %s, not %s", jsonTypeName(name), jsonKind(raw))}
		}
		m.add(name, v)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return members{}, jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooLarge *http.MaxBytesError
		var readErr *bodyReadError
		if err = jsonError(err); errors.As(err, &tooLarge) || errors.As(err, &readErr) {
			return members{}, err
		}
		return members{}, &store.FieldError{Message: "unexpected data after the JSON object"}
	}
	return m, nil
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
		return &store.FieldError{Message: fmt.Sprintf("malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &store.FieldError{Message: "malformed JSON: the body ends inside a value"}
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
func parseQuery(raw string, allowed ...string) (members, error) {
	var q members
	if raw == "" {
		return q, nil
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
			return members{}, &store.FieldError{Message: `the query has an empty parameter ("&&", or "&" at an end)`}
		case strings.Contains(pair, ";"):
			if i := strings.IndexAny(rawName, ";"); i >= 0 {
				name = truncate(rawName[:i])
			}
			return members{}, &store.FieldError{Field: name, Message: `contains ";", which does not separate parameters: use "&" (and %3B for a literal ";")`}
		case nameErr != nil:
			return members{}, &store.FieldError{Field: name, Message: "is not a valid percent-encoded parameter name"}
		case !hasValue:
			return members{}, &store.FieldError{Field: name, Message: "has no value: write " + name + "=value"}
		}
		value, err := url.QueryUnescape(rawValue)
		switch {
		case err != nil:
			return members{}, &store.FieldError{Field: name, Message: "has a value that is not validly percent-encoded"}
		case !slices.Contains(allowed, name):
			known := "none"
			if len(allowed) > 0 {
				known = strings.Join(allowed, ", ")
			}
			return members{}, &store.FieldError{Field: name, Message: fmt.Sprintf("is not a known parameter (known: %s)", known)}
		}
		if !q.add(name, value) {
			return members{}, &store.FieldError{Field: name, Message: "is given more than once"}
		}
	}
	return q, nil
}

// members are the named values of one request, a JSON body's members or a
// query's parameters: each name given at most once, and only names the
// call knows, so a handful. They are an array on the caller's stack, not a
// map that every call would allocate (docs/decisions/0153-lease-api-decodes-request-without-maps.md).
type members struct {
	n      int
	names  [maxMembers]string
	values [maxMembers]string
}

// maxMembers is at least the number of names any call knows
// (TestKnownNamesFitMembers).
const maxMembers = 8

func (m *members) get(name string) string {
	v, _ := m.lookup(name)
	return v
}

func (m *members) lookup(name string) (string, bool) {
	for i := range m.n {
		if m.names[i] == name {
			return m.values[i], true
		}
	}
	return "", false
}

// add adds name, false if it is there already. Callers add only names
// they know, so there is always room.
func (m *members) add(name, value string) bool {
	if _, dup := m.lookup(name); dup {
		return false
	}
	m.names[m.n], m.values[m.n] = name, value
	m.n++
	return true
}

// parseDuration parses member field of m, 0 when absent.
func parseDuration(field string, m *members) (time.Duration, error) {
	s, ok := m.lookup(field)
	if !ok {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, &store.FieldError{Field: field, Message: fmt.Sprintf("must be a Go duration string such as \"30s\" (omit %s for the default); got %q", field, truncate(s))}
	}
	if d < 0 {
		return 0, &store.FieldError{Field: field, Message: "must not be negative"}
	}
	return d, nil
}

// parseTTL is the ttl member: when given it must be positive (the store
// checks the bounds), so that "0s" is not silently the default.
func parseTTL(m *members) (time.Duration, error) {
	d, err := parseDuration("ttl", m)
	if err == nil && d == 0 {
		if _, given := m.lookup("ttl"); given {
			return 0, &store.FieldError{Field: "ttl", Message: "must be positive (omit ttl for the default)"}
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
		return nil, &store.FieldError{Field: field, Message: "is not a label selector: " + truncate(err.Error())}
	}
	return sel, nil
}

func validateNamespace(field, ns string) error {
	if ns == "" || names.IsDNS1123Label(ns) {
		return nil
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return &store.FieldError{Field: field, Message: fmt.Sprintf("%q is not a namespace name: %s", truncate(ns), strings.Join(errs, "; "))}
	}
	return nil
}

// validateText accepts printable UTF-8 up to maxLen bytes.
func validateText(field, s string, maxLen int, required bool) error {
	switch {
	case s == "" && required:
		return &store.FieldError{Field: field, Message: "is required"}
	case len(s) > maxLen:
		return &store.FieldError{Field: field, Message: fmt.Sprintf("is longer than %d bytes", maxLen)}
	case !utf8.ValidString(s):
		return &store.FieldError{Field: field, Message: "is not valid UTF-8"}
	case strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }):
		return &store.FieldError{Field: field, Message: "must not contain control or non-printable characters"}
	}
	return nil
}

// parseDomain is how every call reads a domain (acquire, release, session
// state): normalized (hostrule.NormalizeDomain), then validated. "" is no domain.
// parseCountry reads an ISO 3166-1 alpha-2 code in either case and
// answers it in upper case, as status.exitCountry has it; "" stays "".
func parseCountry(field, raw string) (string, error) {
	c := strings.ToUpper(raw)
	if raw != "" && !wire.IsCountryCode(c) {
		return "", &store.FieldError{Field: field, Message: fmt.Sprintf("%q is not an ISO 3166-1 alpha-2 country code (two letters, such as DE)", truncate(raw))}
	}
	return c, nil
}

func parseDomain(field, raw string) (string, error) {
	d := hostrule.NormalizeDomain(raw)
	if err := validateDomain(field, d); err != nil {
		return "", err
	}
	return d, nil
}

// validateDomain accepts host names, IPv4 and bracketed IPv6 addresses, with
// an optional port: a domain is a key, not something we resolve.
func validateDomain(field, d string) error {
	if len(d) > maxDomainLen {
		return &store.FieldError{Field: field, Message: fmt.Sprintf("is longer than %d bytes", maxDomainLen)}
	}
	for _, r := range d {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune(".-_:[]", r)) {
			return &store.FieldError{Field: field, Message: fmt.Sprintf("%q is not a domain name", truncate(d))}
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
