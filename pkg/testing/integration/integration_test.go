package integration

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// skipRecorder records a Skip instead of ending the test.
type skipRecorder struct {
	testing.TB
	skipped []string
}

func (r *skipRecorder) Helper()          {}
func (r *skipRecorder) Skip(args ...any) { r.skipped = append(r.skipped, fmt.Sprint(args...)) }

// Under -short Needs skips with a message naming what the test needs and how
// to run it; without -short it lets the test run.
func TestNeedsSkipsOnlyUnderShort(t *testing.T) {
	r := &skipRecorder{TB: t}
	Needs(r, "kube-apiserver and etcd from `make testenv`")
	var want []string
	if testing.Short() {
		want = []string{"integration test: needs kube-apiserver and etcd from `make testenv`; run without -short (skipped as testing.Short() is true)"}
	}
	if diff := cmp.Diff(want, r.skipped); diff != "" {
		t.Errorf("Needs with testing.Short()=%t: skip messages (-want +got):\n%s", testing.Short(), diff)
	}
}

// Scaled picks the CI value unless CHAOS=long asks for the long variant.
func TestScaledPicksTheLongVariantOnlyWhenAsked(t *testing.T) {
	for value, want := range map[string]int{"": 10, "short": 10, "long": 1000} {
		t.Setenv(LongEnv, value)
		if got := Scaled(10, 1000); got != want {
			t.Errorf("%s=%q: Scaled(10, 1000) = %d, want %d", LongEnv, value, got, want)
		}
	}
}
