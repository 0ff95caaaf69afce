package sessionid

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestProblem(t *testing.T) {
	tests := map[string]string{
		"crawler-7.example.com":  "",
		strings.Repeat("a", 253): "",
		strings.Repeat("a", 254): "the session id is longer than 253 bytes",
		"a b":                    "the session id must not contain spaces, control or non-printable characters",
		"a\x00b":                 "the session id must not contain spaces, control or non-printable characters",
		"\xff":                   "the session id is not valid UTF-8",
		"日本":                     "",
	}
	got := map[string]string{}
	for id := range tests {
		got[id] = Problem(id)
	}
	if diff := cmp.Diff(tests, got); diff != "" {
		t.Errorf("Problem (-want +got):\n%s", diff)
	}
}
