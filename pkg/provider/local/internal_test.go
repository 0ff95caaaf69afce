package local

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

func TestSysProcAttrDetaches(t *testing.T) {
	saved := testProcAttr
	testProcAttr = nil
	defer func() { testProcAttr = saved }()

	got := sysProcAttr()
	want := &syscall.SysProcAttr{Setsid: true} // no Pdeathsig: the process outlives the operator
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sysProcAttr (-want +got):\n%s", diff)
	}
}

func TestReadProcStat(t *testing.T) {
	start, state, err := readProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if start == 0 {
		t.Error("start time 0")
	}
	if state != 'R' && state != 'S' {
		t.Errorf("state %q of the running test, want R or S", state)
	}
	if _, _, err := readProcStat(1 << 30); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("readProcStat of a pid beyond pid_max: %v, want not-exist", err)
	}
}

// A command name may hold spaces and parentheses; fields are counted after
// the last ')'.
func TestReadProcStatCommandNames(t *testing.T) {
	integration.Needs(t, "copies of true(1) run as processes")
	trueBin, err := exec.LookPath("true")
	if err != nil {
		t.Fatalf("true(1) not found: %v", err)
	}
	data, err := os.ReadFile(trueBin)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, comm := range map[string]string{
		"plain":       "forward-proxy",
		"spaces":      "a b c",
		"parentheses": "x) (y) 1 2 3",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, comm)
			if err := os.WriteFile(path, data, 0o700); err != nil {
				t.Fatal(err)
			}
			proc, err := os.StartProcess(path, []string{path}, &os.ProcAttr{})
			if err != nil {
				t.Fatal(err)
			}
			defer proc.Wait()
			// Until exec, the child carries our name; an exited child keeps
			// its /proc entry until we reap it.
			commPath := "/proc/" + strconv.Itoa(proc.Pid) + "/comm"
			deadline := time.Now().Add(10 * time.Second)
			for {
				got, err := os.ReadFile(commPath)
				if err == nil && strings.TrimSpace(string(got)) == comm {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %q, %v; want %q", commPath, got, err, comm)
				}
				runtime.Gosched()
			}
			start, _, err := readProcStat(proc.Pid)
			if err != nil {
				t.Fatalf("readProcStat(%q): %v", comm, err)
			}
			if start == 0 {
				t.Errorf("start time 0 for %q", comm)
			}
		})
	}
}

func TestWriteFileAtomic(t *testing.T) {
	errBoom := errors.New("boom")
	tests := map[string]struct {
		write       func(*os.File) error
		wantErr     error
		wantContent string
	}{
		"replaces": {
			write:       func(f *os.File) error { _, err := f.WriteString("new"); return err },
			wantContent: "new",
		},
		"a failed write leaves the old file": {
			write: func(f *os.File) error {
				_, _ = f.WriteString("ne") // half written, then failure
				return errBoom
			},
			wantErr:     errBoom,
			wantContent: "old",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "px-1.json")
			if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			err := writeFileAtomic(path, tc.write)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.wantContent {
				t.Errorf("content %q, want %q", got, tc.wantContent)
			}
			entries, _ := os.ReadDir(dir)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if diff := cmp.Diff([]string{"px-1.json"}, names); diff != "" {
				t.Errorf("files left (-want +got):\n%s", diff)
			}
			if tc.wantErr == nil {
				st, _ := os.Stat(path)
				if st.Mode().Perm() != 0o600 {
					t.Errorf("mode %v, want 0600", st.Mode().Perm())
				}
			}
		})
	}
}

// A reader racing a writer sees a whole state file every time: the old one
// or the new one, never a prefix.
func TestStateFileNeverPartial(t *testing.T) {
	p := &Provider{dir: t.TempDir()}
	big := strings.Repeat("x", 64<<10)
	mk := func(i int) state {
		return state{ID: "px-1", PID: i + 1, Host: "127.0.0.1", Tags: map[string]string{"pad": big}}
	}
	if err := p.writeState(mk(0)); err != nil {
		t.Fatal(err)
	}
	const writes = 20 // each fsyncs: slow on a busy disk
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; i <= writes; i++ {
			if err := p.writeState(mk(i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	reads, lastPID := 0, 0
	for lastPID < writes {
		data, err := os.ReadFile(p.statePath("px-1"))
		if err != nil {
			t.Fatalf("read %d: %v", reads, err)
		}
		var st state
		if err := json.Unmarshal(data, &st); err != nil {
			t.Fatalf("read %d saw a partial file (%d bytes): %v", reads, len(data), err)
		}
		if !bytes.HasSuffix(data, []byte("}\n")) || st.Tags["pad"] != big {
			t.Fatalf("read %d saw a truncated file", reads)
		}
		lastPID = st.PID - 1
		reads++
	}
	wg.Wait()
	t.Logf("%d whole reads during %d writes", reads, writes)
}

func TestListeningPortAndLastLogLine(t *testing.T) {
	tests := map[string]struct {
		log      string
		wantPort int32
		wantOK   bool
		wantLast string
	}{
		"klog line": {
			log:      "I1130 10:00:00.000000   42 main.go:99] \"Configuration\" name=\"forward-proxy\"\nI1130 10:00:00.000001   42 main.go:100] \"listening\" addr=127.0.0.1:41234\n",
			wantPort: 41234, wantOK: true,
			wantLast: "I1130 10:00:00.000001   42 main.go:100] \"listening\" addr=127.0.0.1:41234",
		},
		"not yet": {
			log:      "I1130 10:00:00.000000   42 main.go:99] \"Configuration\"\n",
			wantLast: "I1130 10:00:00.000000   42 main.go:99] \"Configuration\"",
		},
		"port zero is no port": {
			log:      "I1130 10:00:00.000001   42 main.go:100] \"listening\" addr=127.0.0.1:0\n",
			wantLast: "I1130 10:00:00.000001   42 main.go:100] \"listening\" addr=127.0.0.1:0",
		},
		"empty": {wantLast: "(empty log)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := &Provider{dir: t.TempDir()}
			if err := os.WriteFile(p.logPath("px-1"), []byte(tc.log), 0o600); err != nil {
				t.Fatal(err)
			}
			port, ok := p.listeningPort("px-1")
			if port != tc.wantPort || ok != tc.wantOK {
				t.Errorf("listeningPort = %d, %v; want %d, %v", port, ok, tc.wantPort, tc.wantOK)
			}
			if got := p.lastLogLine("px-1"); got != tc.wantLast {
				t.Errorf("lastLogLine = %q, want %q", got, tc.wantLast)
			}
		})
	}
}

func TestReadStateRejectsGarbage(t *testing.T) {
	tests := map[string]string{
		"not json":     "{\"id\": \"px-1\", \"pid\"",
		"another id":   `{"id": "px-2", "pid": 5}`,
		"no pid":       `{"id": "px-1"}`,
		"negative pid": `{"id": "px-1", "pid": -1}`,
	}
	for name, content := range tests {
		t.Run(name, func(t *testing.T) {
			p := &Provider{dir: t.TempDir()}
			if err := os.WriteFile(p.statePath("px-1"), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := p.readState("px-1"); !errors.Is(err, errCorruptState) {
				t.Errorf("readState: %v, want errCorruptState", err)
			}
		})
	}
}
