package gce

import (
	"encoding/json"
	"testing"

	gcompute "google.golang.org/api/compute/v1"

	"github.com/proxyfleet/proxy-operator/pkg/provider/gce/compute"
)

// The fake (gcetest) speaks through google.golang.org/api's generated types,
// so every test through it checks the hand-written client's JSON against
// Google's own (docs/decisions/0150-gce-provider-talks-compute-engine-through.md). These convert a VM between the two, through
// JSON as the wire does.

func toGoogle(t *testing.T, vm *compute.Instance) *gcompute.Instance {
	t.Helper()
	return convert[gcompute.Instance](t, vm)
}

func fromGoogle(t *testing.T, vm *gcompute.Instance) *compute.Instance {
	t.Helper()
	return convert[compute.Instance](t, vm)
}

func convert[T any](t *testing.T, from any) *T {
	t.Helper()
	b, err := json.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	var to T
	if err := json.Unmarshal(b, &to); err != nil {
		t.Fatal(err)
	}
	return &to
}
