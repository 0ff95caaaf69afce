package lease

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The request decoders turn bodies and queries into store requests. They are
// strict (unknown fields and parameters, repeated parameters and trailing
// data are errors) and name the offending field in a *FieldError; a body
// over the size limit surfaces as *http.MaxBytesError.

// Length limits of free-form fields.
const (
	maxHolderLen  = 253
	maxSessionLen = 253
	maxDomainLen  = 253
)

// acquireBody is the JSON of POST /v1/leases. Durations are Go duration strings.
type acquireBody struct {
	Holder    string `json:"holder"`
	Namespace string `json:"namespace"`
	Selector  string `json:"selector"`
	TTL       string `json:"ttl"`
	Domain    string `json:"domain"`
	Session   string `json:"session"`
	Wait      string `json:"wait"`
}

// renewBody is the JSON of POST /v1/leases/{id}/renew; it may be empty.
type renewBody struct {
	TTL string `json:"ttl"`
}

func decodeAcquire(body io.Reader) (AcquireRequest, error) {
	var b acquireBody
	if err := decodeJSON(body, &b, false); err != nil {
		return AcquireRequest{}, err
	}
	req := AcquireRequest{Holder: b.Holder, Namespace: b.Namespace, Domain: NormalizeDomain(b.Domain), Session: b.Session}
	var err error
	if err = validateText("holder", req.Holder, maxHolderLen, true); err != nil {
		return AcquireRequest{}, err
	}
	if err = validateNamespace("namespace", req.Namespace); err != nil {
		return AcquireRequest{}, err
	}
	if req.Selector, err = parseSelector("selector", b.Selector); err != nil {
		return AcquireRequest{}, err
	}
	if req.TTL, err = parseDuration("ttl", b.TTL); err != nil {
		return AcquireRequest{}, err
	}
	if req.Wait, err = parseDuration("wait", b.Wait); err != nil {
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
	var b renewBody
	if err := decodeJSON(body, &b, true); err != nil {
		return 0, err
	}
	return parseDuration("ttl", b.TTL)
}

// releaseQuery is DELETE /v1/leases/{id}?outcome=&domain=.
type releaseQuery struct {
	outcome Outcome
	domain  string
}

func decodeRelease(q url.Values) (releaseQuery, error) {
	if err := checkQuery(q, "outcome", "domain"); err != nil {
		return releaseQuery{}, err
	}
	r := releaseQuery{outcome: Outcome(q.Get("outcome")), domain: NormalizeDomain(q.Get("domain"))}
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

func decodeList(q url.Values) (LeaseFilter, error) {
	if err := checkQuery(q, "holder", "namespace"); err != nil {
		return LeaseFilter{}, err
	}
	f := LeaseFilter{Holder: q.Get("holder"), Namespace: q.Get("namespace")}
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

func decodeProxies(q url.Values) (proxiesQuery, error) {
	if err := checkQuery(q, "namespace", "selector"); err != nil {
		return proxiesQuery{}, err
	}
	pq := proxiesQuery{namespace: q.Get("namespace")}
	if err := validateNamespace("namespace", pq.namespace); err != nil {
		return proxiesQuery{}, err
	}
	var err error
	if pq.selector, err = parseSelector("selector", q.Get("selector")); err != nil {
		return proxiesQuery{}, err
	}
	return pq, nil
}

// decodeJSON decodes one JSON object into v, strictly. An empty body is
// an error unless allowEmpty.
func decodeJSON(body io.Reader, v any, allowEmpty bool) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			if allowEmpty {
				return nil
			}
			return &FieldError{Message: "the request body is empty: want a JSON object"}
		}
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return tooLarge
		}
		return &FieldError{Message: "unexpected data after the JSON object"}
	}
	return nil
}

// jsonError explains a decoding error, naming the field where it can.
func jsonError(err error) error {
	var (
		tooLarge  *http.MaxBytesError
		typeErr   *json.UnmarshalTypeError
		syntaxErr *json.SyntaxError
	)
	switch {
	case errors.As(err, &tooLarge):
		return tooLarge
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return &FieldError{Message: "the request body must be a JSON object"}
		}
		return &FieldError{Field: typeErr.Field, Message: fmt.Sprintf("must be a %s, not a JSON %s", jsonTypeName(typeErr.Field), typeErr.Value)}
	case errors.As(err, &syntaxErr):
		return &FieldError{Message: fmt.Sprintf("malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &FieldError{Message: "malformed JSON: the body ends inside a value"}
	}
	// encoding/json has no type for this one; its message is stable.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return &FieldError{Field: truncate(strings.Trim(name, `"`)), Message: "is not a known field"}
	}
	return &FieldError{Message: "malformed JSON: " + err.Error()}
}

func jsonTypeName(field string) string {
	switch field {
	case "ttl", "wait":
		return `Go duration string such as "30s"`
	}
	return "string"
}

// checkQuery rejects parameters other than allowed, and repeated ones.
func checkQuery(q url.Values, allowed ...string) error {
	for name, values := range q {
		if !slices.Contains(allowed, name) {
			return &FieldError{Field: truncate(name), Message: fmt.Sprintf("is not a known parameter (known: %s)", strings.Join(allowed, ", "))}
		}
		if len(values) > 1 {
			return &FieldError{Field: name, Message: "is given more than once"}
		}
	}
	return nil
}

func parseDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, &FieldError{Field: field, Message: fmt.Sprintf("must be a Go duration string such as \"30s\"; got %q", truncate(s))}
	}
	if d < 0 {
		return 0, &FieldError{Field: field, Message: "must not be negative"}
	}
	return d, nil
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
