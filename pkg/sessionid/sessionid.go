// Package sessionid is the one rule for a sticky session's id, the
// `session-<id>` term of a username, shared by the gateway (which keeps a
// session on one lease) and the forward-proxy (which maps it to an exit
// address): the same id is valid at both, or at neither. It imports
// nothing of the project, so the forward-proxy binary stays small.
package sessionid

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxLen is the longest id, in bytes: a DNS name's length, room for the
// ids crawlers derive from hostnames.
const MaxLen = 253

// Problem says what is wrong with a non-empty id, "" when nothing is. The
// caller decides whether an empty id is allowed.
func Problem(id string) string {
	switch {
	case len(id) > MaxLen:
		return fmt.Sprintf("the session id is longer than %d bytes", MaxLen)
	case !utf8.ValidString(id):
		return "the session id is not valid UTF-8"
	case strings.ContainsFunc(id, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }):
		return "the session id must not contain spaces, control or non-printable characters"
	}
	return ""
}
