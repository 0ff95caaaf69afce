package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

func TestPrinterShowsWhatGoTestWouldAndKeepsTheTimes(t *testing.T) {
	stream := strings.Join([]string{
		`{"Action":"start","Package":"example.com/a"}`,
		`{"Action":"run","Package":"example.com/a","Test":"TestOK"}`,
		`{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}`,
		`{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"    a_test.go:9: noise of a passing test\n"}`,
		`{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"--- PASS: TestOK (0.10s)\n"}`,
		`{"Action":"pass","Package":"example.com/a","Test":"TestOK","Elapsed":0.1}`,
		`{"Action":"run","Package":"example.com/a","Test":"TestBad"}`,
		`{"Action":"output","Package":"example.com/a","Test":"TestBad","Output":"=== RUN   TestBad\n"}`,
		`{"Action":"output","Package":"example.com/a","Test":"TestBad","Output":"    a_test.go:12: want 2, got 3\n"}`,
		`{"Action":"output","Package":"example.com/a","Test":"TestBad","Output":"--- FAIL: TestBad (0.20s)\n"}`,
		`{"Action":"fail","Package":"example.com/a","Test":"TestBad","Elapsed":0.2}`,
		`{"Action":"output","Package":"example.com/a","Output":"FAIL\n"}`,
		`{"Action":"output","Package":"example.com/a","Output":"timetable-cpu: user=1.500 sys=0.250\n"}`,
		`{"Action":"output","Package":"example.com/a","Output":"FAIL\texample.com/a\t0.400s\n"}`,
		`{"Action":"fail","Package":"example.com/a","Elapsed":0.4}`,
		`{"Action":"output","Package":"example.com/b","Output":"PASS\n"}`,
		`{"Action":"output","Package":"example.com/b","Output":"timetable-cpu: user=0.010 sys=0.020\n"}`,
		`{"Action":"output","Package":"example.com/b","Output":"ok  \texample.com/b\t(cached)\n"}`,
		`{"Action":"pass","Package":"example.com/b","Elapsed":0}`,
		`{"Action":"run","Package":"example.com/c","Test":"TestHangs"}`,
		`{"Action":"output","Package":"example.com/c","Test":"TestHangs","Output":"panic: test timed out after 1s\n"}`,
		`{"Action":"output","Package":"example.com/c","Output":"FAIL\texample.com/c\t1.000s\n"}`,
		`{"Action":"fail","Package":"example.com/c","Elapsed":1}`,
		`{"Action":"output","Package":"example.com/d","Output":"?   \texample.com/d\t[no test files]\n"}`,
		`{"Action":"skip","Package":"example.com/d","Elapsed":0}`,
		`not json: go's own words`,
	}, "\n")
	var out bytes.Buffer
	p := newPrinter(&out, false)
	if err := p.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	wantOut := "    a_test.go:12: want 2, got 3\n--- FAIL: TestBad (0.20s)\nFAIL\nFAIL\texample.com/a\t0.400s\n" +
		"ok  \texample.com/b\t(cached)\n" +
		"panic: test timed out after 1s\nFAIL\texample.com/c\t1.000s\n" +
		"?   \texample.com/d\t[no test files]\nnot json: go's own words\n"
	if diff := cmp.Diff(wantOut, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	var rows []packageRow
	for _, name := range p.order {
		rows = append(rows, *p.rows[name])
	}
	wantRows := []packageRow{
		{Package: "example.com/a", Result: "fail", Wall: 0.4, User: 1.5, Sys: 0.25, HasCPU: true},
		{Package: "example.com/b", Result: "pass", User: 0.01, Sys: 0.02, HasCPU: true, Cached: true},
		{Package: "example.com/c", Result: "fail", Wall: 1},
	}
	if diff := cmp.Diff(wantRows, rows); diff != "" {
		t.Errorf("package rows (-want +got):\n%s", diff)
	}
	wantTests := []testRow{{"example.com/a", "TestOK", "pass", 0.1}, {"example.com/a", "TestBad", "fail", 0.2}}
	if diff := cmp.Diff(wantTests, p.tests); diff != "" {
		t.Errorf("test rows (-want +got):\n%s", diff)
	}
}

func TestPrinterVerbosePrintsEveryLineButTheMarker(t *testing.T) {
	stream := `{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}` + "\n" +
		`{"Action":"output","Package":"p","Output":"timetable-cpu: user=1 sys=2\n"}` + "\n" +
		`{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}`
	var out bytes.Buffer
	if err := newPrinter(&out, true).read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "=== RUN   TestA\nok  \tp\t0.1s\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

func TestGoTestArgsPutsDashCFirst(t *testing.T) {
	for name, tc := range map[string]struct{ args, want []string }{
		"plain":  {[]string{"-race", "./..."}, []string{"test", "-json", "-exec", "'/t' exec", "-race", "./..."}},
		"-C dir": {[]string{"-C", "hack/image", "./..."}, []string{"test", "-C", "hack/image", "-json", "-exec", "'/t' exec", "./..."}},
		"-C=dir": {[]string{"-C=hack/image", "./..."}, []string{"test", "-C=hack/image", "-json", "-exec", "'/t' exec", "./..."}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, goTestArgs("/t", tc.args)); diff != "" {
				t.Errorf("go args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNestStepsIndentsTheStepsInsideAnother(t *testing.T) {
	// As written: each line when its step ends.
	steps := nestSteps([]step{
		{Start: 0, End: 5, Name: "install deps"},
		{Start: 5.1, End: 10, Name: "make test: go test"},
		{Start: 10.1, End: 10.2, Name: "make test: image"},
		{Start: 10.2, End: 20, Name: "make e2e: suite"},
		{Start: 10.2, End: 20, Name: "make e2e"},
		{Start: 5, End: 20.1, Name: "make test"},
		{Start: 20.1, End: 21, RC: 1, Name: "make fuzz"},
	})
	var got []string
	for _, s := range steps {
		got = append(got, strings.Repeat(" ", s.Depth)+s.Name)
	}
	want := []string{"install deps", "make test", " make test: go test", " make test: image", " make e2e", "  make e2e: suite", "make fuzz"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
}

func TestReportFailsOverTheBudgetAndSaysSo(t *testing.T) {
	var out bytes.Buffer
	printTable(&out, []step{{Start: 0, End: 3000, Name: "make test"}},
		[]packageRow{{Package: "p", Result: "pass", Wall: 2, User: 1, Sys: 2, HasCPU: true}}, 3000*time.Second, 2700*time.Second)
	for _, want := range []string{"  3000  make test", "     2.0      3.0      1.0      2.0  pass   p", "total 3000 s of a 2700 s budget: OVER THE BUDGET"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table has no %q:\n%s", want, out.String())
		}
	}
}

// burnEnv makes this test binary a helper: "parent" starts a copy of
// itself as "child" and waits for it; "child" burns CPU.
const burnEnv = "TIMETABLE_TEST_BURN"

// burnCPU is how much CPU the grandchild uses.
const burnCPU = 400 * time.Millisecond

func TestMain(m *testing.M) {
	switch os.Getenv(burnEnv) {
	case "parent":
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), burnEnv+"=child")
		if err := cmd.Run(); err != nil {
			os.Exit(3)
		}
		os.Exit(0)
	case "child":
		for ownCPU() < burnCPU {
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func ownCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The claim the table's CPU column rests on: the rusage of a reaped test
// binary includes the processes it started and waited for (kube-apiserver
// and etcd through testenv), on Linux.
func TestExecCountsTheCPUOfReapedDescendants(t *testing.T) {
	integration.Needs(t, "copies of this test binary run as processes")
	t.Setenv(burnEnv, "parent")
	var out bytes.Buffer
	if code := execTestBinary([]string{os.Args[0]}, &out); code != 0 {
		t.Fatalf("exit code %d, output %q", code, out.String())
	}
	_, user, sys, ok := parseCPUMarker(strings.TrimSpace(out.String()))
	if !ok {
		t.Fatalf("no CPU line in %q", out.String())
	}
	t.Logf("the helper and the grandchild it reaped: user %.3fs, sys %.3fs", user, sys)
	if got := time.Duration((user + sys) * float64(time.Second)); got < burnCPU {
		t.Errorf("exec reported %v of CPU; the grandchild alone used %v", got, burnCPU)
	}
}

func TestExecPassesOnTheExitCode(t *testing.T) {
	integration.Needs(t, "copies of this test binary run as processes")
	t.Setenv(burnEnv, "")
	var out bytes.Buffer
	if code := execTestBinary([]string{os.Args[0], "-test.run=^$", "-test.count=bad"}, &out); code == 0 {
		t.Errorf("exit code 0 for a bad flag; output %q", out.String())
	}
}
