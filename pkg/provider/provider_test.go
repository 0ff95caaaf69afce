package provider

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestClass(t *testing.T) {
	base := errors.New("boom")
	tests := map[string]struct {
		err       error
		wantClass error
		wantName  string
	}{
		"unclassified is transient": {err: base, wantClass: ErrTransient, wantName: "transient"},
		"transient":                 {err: Transient(base), wantClass: ErrTransient, wantName: "transient"},
		"quota":                     {err: Quota(base), wantClass: ErrQuotaExceeded, wantName: "quota"},
		"permanent":                 {err: Permanent(base), wantClass: ErrPermanent, wantName: "permanent"},
		"wrapped quota":             {err: fmt.Errorf("create px-1: %w", Quota(base)), wantClass: ErrQuotaExceeded, wantName: "quota"},
		"wrapped permanent":         {err: fmt.Errorf("create: %w", Permanent(base)), wantClass: ErrPermanent, wantName: "permanent"},
		"with class quota":          {err: WithClass(ErrQuotaExceeded, base), wantClass: ErrQuotaExceeded, wantName: "quota"},
		"with class permanent":      {err: WithClass(ErrPermanent, base), wantClass: ErrPermanent, wantName: "permanent"},
		"with class transient":      {err: WithClass(ErrTransient, base), wantClass: ErrTransient, wantName: "transient"},
		"with an unknown class":     {err: WithClass(ErrNotFound, base), wantClass: ErrTransient, wantName: "transient"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Class(tc.err); got != tc.wantClass {
				t.Errorf("Class = %v, want %v", got, tc.wantClass)
			}
			if got := ClassName(tc.err); got != tc.wantName {
				t.Errorf("ClassName = %q, want %q", got, tc.wantName)
			}
			if !errors.Is(tc.err, base) {
				t.Error("the original error is no longer reachable with errors.Is")
			}
			if !strings.HasSuffix(tc.err.Error(), "boom") {
				t.Errorf("message lost the cause: %q", tc.err.Error())
			}
		})
	}
}

func TestInstanceName(t *testing.T) {
	tests := map[types.UID]string{
		"6f1c2a3b-4d5e-6f70-8192-a3b4c5d6e7f8": "px-6f1c2a3b4d5e6f70",
		"ABCDEF01-2345-6789-abcd-ef0123456789": "px-abcdef0123456789",
		"short":                                "px-short",
	}
	for uid, want := range tests {
		if got := InstanceName(uid); got != want {
			t.Errorf("InstanceName(%q) = %q, want %q", uid, got, want)
		}
	}
}

func TestProviderID(t *testing.T) {
	tests := map[string]struct {
		in               string
		wantName, wantID string
		wantOK           bool
	}{
		"kubernetes":       {in: ProviderID("kubernetes", "ns/px-1"), wantName: "kubernetes", wantID: "ns/px-1", wantOK: true},
		"gce with slashes": {in: ProviderID("gce", "proj/zone/px-1"), wantName: "gce", wantID: "proj/zone/px-1", wantOK: true},
		"no scheme":        {in: "px-1"},
		"empty id":         {in: "local://"},
		"empty provider":   {in: "://px-1"},
		"empty":            {in: ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			gotName, gotID, ok := SplitProviderID(tc.in)
			if gotName != tc.wantName || gotID != tc.wantID || ok != tc.wantOK {
				t.Errorf("SplitProviderID(%q) = %q, %q, %v; want %q, %q, %v", tc.in, gotName, gotID, ok, tc.wantName, tc.wantID, tc.wantOK)
			}
		})
	}
}
