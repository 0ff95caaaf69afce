package wire

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestIsCountryCode(t *testing.T) {
	got := map[string]bool{}
	for _, s := range []string{"DE", "US", "de", "D", "DEU", "D1", ""} {
		got[s] = IsCountryCode(s)
	}
	want := map[string]bool{"DE": true, "US": true, "de": false, "D": false, "DEU": false, "D1": false, "": false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("IsCountryCode (-want +got):\n%s", diff)
	}
}
