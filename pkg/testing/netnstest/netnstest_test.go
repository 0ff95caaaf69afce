package netnstest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestOwnerPID(t *testing.T) {
	type owner struct {
		PID int
		OK  bool
	}
	tests := map[string]owner{
		"pxotest-4242-exitproxy": {4242, true},
		"pxotest-17-a-b":         {17, true},
		"pxotest-x-exitproxy":    {0, false},
		"pxotest--exitproxy":     {0, false},
		"cni-1234":               {0, false},
		"":                       {0, false},
	}
	for name, want := range tests {
		pid, ok := ownerPID(name)
		if diff := cmp.Diff(want, owner{pid, ok}); diff != "" {
			t.Errorf("ownerPID(%q) (-want +got):\n%s", name, diff)
		}
	}
}
