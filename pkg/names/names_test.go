package names

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation"
)

var seeds = []string{"", "a", "0", "a-b", "a--b", "-a", "a-", "A", "aB", "a.b", "a_b", "_a", "a_", ".a", "a.",
	"é", "a b", "crawl", strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("A", 63), strings.Repeat("A", 64)}

// checkAgrees fails unless both checks answer as apimachinery's do.
func checkAgrees(t *testing.T, s string) {
	t.Helper()
	got := [2]bool{IsDNS1123Label(s), IsLabelValue(s)}
	want := [2]bool{len(validation.IsDNS1123Label(s)) == 0, len(validation.IsValidLabelValue(s)) == 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%q: [DNS-1123 label, label value] (-validation +ours):\n%s", s, diff)
	}
}

func TestChecksAgreeWithValidation(t *testing.T) {
	for _, s := range seeds {
		checkAgrees(t, s)
	}
}

func FuzzChecksAgreeWithValidation(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(checkAgrees)
}
