package main

import (
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestStatCPU(t *testing.T) {
	tests := map[string]struct {
		line    string
		want    time.Duration
		wantErr bool
	}{
		"plain": {line: "1234 (forward-proxy) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 8 0 100 0 0",
			want: 3250 * time.Millisecond},
		"spaces and parentheses in the name": {line: "7 (a b) (c)) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 1 0 0", want: 30 * time.Millisecond},
		"truncated":                          {line: "7 (x) R 1 7", wantErr: true},
		"no name":                            {line: "7 x R", wantErr: true},
		"not numbers":                        {line: "7 (x) R 1 7 7 0 -1 0 0 0 0 0 u s 0 0 20 0 1 0 1 0 0", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := statCPU(tc.line)
			if (err != nil) != tc.wantErr {
				t.Fatalf("statCPU(%q) = %v, %v; want error %v", tc.line, got, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("statCPU(%q) (-want +got):\n%s", tc.line, diff)
			}
		})
	}
}

var sink int

// processCPU reads this very process: it has run, so it has spent CPU.
func TestProcessCPUOfItself(t *testing.T) {
	for deadline := time.Now().Add(10 * time.Second); ; {
		d, err := processCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if d > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no CPU time counted for the test process")
		}
		for i := range 1_000_000 { // spend some
			sink += i * i
		}
	}
}

func TestMedian(t *testing.T) {
	rs := []result{{perSecond: 3}, {perSecond: 1}, {perSecond: 2}}
	if got := median(rs, perSecond); got != 2 {
		t.Errorf("median = %v, want 2", got)
	}
	if got := median(nil, perSecond); got != 0 {
		t.Errorf("median of nothing = %v, want 0", got)
	}
}
