// Package names checks Kubernetes names and label values as apimachinery's
// validation does, without its regular expressions: the lease API and the
// gateway check one or two on every call, and the regexps cost more than
// the rest of decoding a request (docs/decisions/0153-lease-api-decodes-request-without-maps.md).
// apimachinery still writes the messages when a check fails; the tests
// hold each function to its answer.
package names

import "k8s.io/apimachinery/pkg/util/validation"

// IsDNS1123Label is validation.IsDNS1123Label (namespaces): 1 to 63 of
// [a-z0-9-], alphanumeric at both ends.
func IsDNS1123Label(s string) bool {
	if len(s) == 0 || len(s) > validation.DNS1123LabelMaxLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}

// IsLabelValue is validation.IsValidLabelValue: at most 63 of
// [A-Za-z0-9-_.], alphanumeric at both ends, or empty.
func IsLabelValue(s string) bool {
	if len(s) > validation.LabelValueMaxLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && ((c != '-' && c != '_' && c != '.') || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}
