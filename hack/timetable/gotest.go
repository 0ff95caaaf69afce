package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// event is one line of go test -json (cmd/test2json's TestEvent).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// packageRow is one test package's line of the table.
type packageRow struct {
	Package   string
	Result    string // pass, fail
	Wall      float64
	User, Sys float64
	HasCPU    bool // exec's marker was seen: false when the binary was killed
	Cached    bool
}

// testRow is one test's result, for the list of tests CI runs.
type testRow struct {
	Package, Test, Result string
	Elapsed               float64
}

// goTest runs go test -json with exec as its -exec program, prints what go
// test would have printed (everything when the args ask for -v), and
// appends the packages' and tests' rows to dir's files. It returns go
// test's exit code.
func goTest(args []string, dir string) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "timetable go-test: %v\n", err)
		return 2
	}
	cmd := exec.Command("go", goTestArgs(self, args)...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	stream, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "timetable go-test: %v\n", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "timetable go-test: %v\n", err)
		return 2
	}
	p := newPrinter(os.Stdout, slices.Contains(args, "-v"))
	readErr := p.read(stream)
	waitErr := cmd.Wait()
	if dir != "" {
		if err := p.write(dir); err != nil {
			fmt.Fprintf(os.Stderr, "timetable go-test: %v\n", err)
			return 2
		}
	}
	if readErr != nil {
		fmt.Fprintf(os.Stderr, "timetable go-test: reading go test -json: %v\n", readErr)
		return 2
	}
	var exitErr *exec.ExitError
	if errors.As(waitErr, &exitErr) {
		return exitErr.ExitCode()
	}
	if waitErr != nil {
		fmt.Fprintf(os.Stderr, "timetable go-test: %v\n", waitErr)
		return 2
	}
	return 0
}

// goTestArgs is go's command line: -C, which go wants first, then -json
// and -exec, then the caller's flags and packages.
func goTestArgs(self string, args []string) []string {
	out := []string{"test"}
	if len(args) >= 2 && args[0] == "-C" {
		out, args = append(out, args[:2]...), args[2:]
	} else if len(args) >= 1 && strings.HasPrefix(args[0], "-C=") {
		out, args = append(out, args[0]), args[1:]
	}
	// go splits -exec into fields, honouring quotes.
	out = append(out, "-json", "-exec", "'"+self+"' exec")
	return append(out, args...)
}

// printer turns the -json stream back into go test's output. Without -v
// that is each package's own lines and the output of the tests that fail
// (held until they end); with -v, every line.
type printer struct {
	out     io.Writer
	verbose bool
	held    map[string][]string // package + "\x00" + test: output of a running test
	rows    map[string]*packageRow
	order   []string // packages in the order they ended
	tests   []testRow
}

func newPrinter(out io.Writer, verbose bool) *printer {
	return &printer{out: out, verbose: verbose, held: map[string][]string{}, rows: map[string]*packageRow{}}
}

func (p *printer) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(p.out, sc.Text()) // not an event: go's own words
			continue
		}
		p.handle(e)
	}
	return sc.Err()
}

func (p *printer) row(pkg string) *packageRow {
	r := p.rows[pkg]
	if r == nil {
		r = &packageRow{Package: pkg}
		p.rows[pkg] = r
	}
	return r
}

func (p *printer) handle(e event) {
	key := e.Package + "\x00" + e.Test
	switch e.Action {
	case "build-output":
		fmt.Fprint(p.out, e.Output)
	case "output":
		text, user, sys, ok := parseCPUMarker(e.Output)
		if ok {
			r := p.row(e.Package)
			r.User, r.Sys, r.HasCPU = user, sys, true
			if text == "" {
				return
			}
		}
		if e.Test == "" && summary(text) {
			// The binary is done: what its unfinished tests printed goes
			// before go test's verdict, as without -json.
			p.flushPackage(e.Package)
			p.row(e.Package).Cached = strings.Contains(text, "(cached)")
		}
		switch {
		case p.verbose:
			fmt.Fprint(p.out, text)
		case e.Test != "":
			p.held[key] = append(p.held[key], text)
		case !framing(text) && text != "PASS\n":
			fmt.Fprint(p.out, text)
		}
	case "pass", "fail", "skip":
		if e.Test != "" {
			if e.Action == "fail" {
				p.flush(key)
			}
			delete(p.held, key)
			p.tests = append(p.tests, testRow{e.Package, e.Test, e.Action, e.Elapsed})
			return
		}
		p.flushPackage(e.Package) // what was running when the binary died
		if e.Action == "skip" {   // no test files
			return
		}
		r := p.row(e.Package)
		r.Result, r.Wall = e.Action, e.Elapsed
		p.order = append(p.order, e.Package)
	}
}

// flush prints a failed test's output, without go test's framing lines.
func (p *printer) flush(key string) {
	for _, line := range p.held[key] {
		if !framing(line) {
			fmt.Fprint(p.out, line)
		}
	}
}

// flushPackage prints and forgets the output of a package's unfinished
// tests: with its binary done, they never will.
func (p *printer) flushPackage(pkg string) {
	var keys []string
	for k := range p.held {
		if strings.HasPrefix(k, pkg+"\x00") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		p.flush(k)
		delete(p.held, k)
	}
}

// summary reports go test's line for a package whose binary ran.
func summary(line string) bool {
	return strings.HasPrefix(line, "ok  \t") || strings.HasPrefix(line, "FAIL\t")
}

// framing reports lines that only say which test runs (=== RUN and kin).
func framing(line string) bool {
	for _, prefix := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}

// write appends the packages' rows to dir/packages.tsv and the tests' to
// dir/tests.tsv.
func (p *printer) write(dir string) error {
	var pkgs, tests strings.Builder
	for _, name := range p.order {
		r := p.rows[name]
		fmt.Fprintf(&pkgs, "%s\t%s\t%.3f\t%s\t%s\t%t\n", r.Package, r.Result, r.Wall, cpuField(r.User, r.HasCPU), cpuField(r.Sys, r.HasCPU), r.Cached)
	}
	for _, t := range p.tests {
		fmt.Fprintf(&tests, "%s\t%s\t%s\t%.3f\n", t.Package, t.Test, t.Result, t.Elapsed)
	}
	if err := appendFile(filepath.Join(dir, "packages.tsv"), pkgs.String()); err != nil {
		return err
	}
	return appendFile(filepath.Join(dir, "tests.tsv"), tests.String())
}

func cpuField(seconds float64, known bool) string {
	if !known {
		return "-"
	}
	return fmt.Sprintf("%.3f", seconds)
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
