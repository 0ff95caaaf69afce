package gateway

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire"
	"github.com/proxyfleet/proxy-operator/pkg/names"
	"github.com/proxyfleet/proxy-operator/pkg/sessionid"
)

// PoolLabel is the label a ProxyPool puts on its members; the pool- term
// selects on it.
const PoolLabel = crawlv1alpha1.PoolLabel

// The keys of the username's terms.
const (
	keyNamespace = "ns"
	keyPool      = "pool"
	keySession   = "session"
	keyCountry   = "country"
)

// Target is what a username asks for. Empty fields mean "any": any
// namespace the caller may lease in, any proxy, rotating mode.
type Target struct {
	Namespace string
	Pool      string
	Session   string
	// Country is the exit country asked for (the country- term): an ISO
	// 3166-1 alpha-2 code in upper case, matched against the proxies'
	// status.exitCountry.
	Country string
}

// Selector is the label selector of the pool term (everything without one).
func (t Target) Selector() labels.Selector {
	if t.Pool == "" {
		return labels.Everything()
	}
	return labels.SelectorFromSet(labels.Set{PoolLabel: t.Pool})
}

// TermError is a username the gateway cannot read: it names the term.
type TermError struct {
	Term   string
	Reason string
}

func (e *TermError) Error() string {
	return fmt.Sprintf("username term %q: %s", truncate(e.Term), e.Reason)
}

// ParseUsername reads the username grammar: terms joined by '+', each
// key-value split at the first '-' (so values may contain '-'), keys ns,
// pool, session and country, each at most once. The empty username asks for nothing.
func ParseUsername(username string) (Target, error) {
	var t Target
	if username == "" {
		return t, nil
	}
	var seen [4]bool // ns, pool, session, country
	for term := range strings.SplitSeq(username, "+") {
		key, value, ok := strings.Cut(term, "-")
		switch {
		case term == "":
			return Target{}, &TermError{Term: term, Reason: "is empty (two '+' in a row, or one at either end)"}
		case !ok:
			return Target{}, &TermError{Term: term, Reason: "is not key-value (want ns-<namespace>, pool-<pool>, session-<id> or country-<code>)"}
		case keyIndex(key) < 0:
			return Target{}, &TermError{Term: term, Reason: fmt.Sprintf("unknown key %q (known: ns, pool, session, country)", truncate(key))}
		case seen[keyIndex(key)]:
			return Target{}, &TermError{Term: term, Reason: fmt.Sprintf("key %q is given more than once", key)}
		case value == "":
			return Target{}, &TermError{Term: term, Reason: "has an empty value"}
		}
		seen[keyIndex(key)] = true
		switch key {
		case keyNamespace:
			// The regular expressions of pkg/util/validation run only to
			// word the error: every tunnel parses a username.
			if !names.IsDNS1123Label(value) {
				if errs := validation.IsDNS1123Label(value); len(errs) > 0 {
					return Target{}, &TermError{Term: term, Reason: "is not a namespace name: " + strings.Join(errs, "; ")}
				}
			}
			t.Namespace = value
		case keyPool:
			if !names.IsLabelValue(value) {
				if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
					return Target{}, &TermError{Term: term, Reason: "is not a pool name: " + strings.Join(errs, "; ")}
				}
			}
			t.Pool = value
		case keySession:
			if err := sessionid.Problem(value); err != "" {
				return Target{}, &TermError{Term: term, Reason: err}
			}
			t.Session = value
		case keyCountry:
			code := strings.ToUpper(value)
			if !wire.IsCountryCode(code) {
				return Target{}, &TermError{Term: term, Reason: "is not an ISO 3166-1 alpha-2 country code (two letters, such as country-de)"}
			}
			t.Country = code
		}
	}
	return t, nil
}

func keyIndex(key string) int {
	switch key {
	case keyNamespace:
		return 0
	case keyPool:
		return 1
	case keySession:
		return 2
	case keyCountry:
		return 3
	}
	return -1
}

// truncate keeps echoed input short in error messages.
func truncate(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
