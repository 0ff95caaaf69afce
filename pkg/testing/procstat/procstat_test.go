package procstat

import (
	"bufio"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseCPU(t *testing.T) {
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
			got, err := parseCPU(tc.line)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseCPU(%q) = %v, %v; want error %v", tc.line, got, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseCPU(%q) (-want +got):\n%s", tc.line, diff)
			}
		})
	}
}

var sink int

// CPU reads this very process: it has run, so it has spent CPU.
func TestCPUOfItself(t *testing.T) {
	for deadline := time.Now().Add(10 * time.Second); ; {
		d, err := CPU(os.Getpid())
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

func TestParseRSS(t *testing.T) {
	tests := map[string]struct {
		status  string
		want    int64
		wantErr bool
	}{
		"a process": {status: "Name:\tproxy-operator\nVmPeak:\t 900000 kB\nVmRSS:\t   51200 kB\nRssAnon:\t 40000 kB\n", want: 50 << 20},
		"no VmRSS":  {status: "Name:\tkthreadd\nState:\tS (sleeping)\n", wantErr: true},
		"not kB":    {status: "VmRSS:\t 12 MB\n", wantErr: true},
		"garbled":   {status: "VmRSS:\t twelve kB\n", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseRSS(bufio.NewScanner(strings.NewReader(tc.status)))
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseRSS = %v, %v; want error %v", got, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseRSS (-want +got):\n%s", diff)
			}
		})
	}
}

// RSS reads this very process: it has resident pages.
func TestRSSOfItself(t *testing.T) {
	rss, err := RSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss <= 0 {
		t.Errorf("RSS of the test process = %d, want > 0", rss)
	}
}
