package main

import (
	"bufio"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// step is one line of steps.tsv: "start end rc name", times in Unix
// seconds with a fraction (date +%s.%N).
type step struct {
	Start, End float64
	RC         int
	Name       string
	Depth      int // how many recorded steps contain it
}

// report prints the table of the steps and the test packages recorded in
// dir, and the total since start against the budget; it fails (1) when the
// total is over the budget.
func report(args []string, dir string) int {
	flags := flag.NewFlagSet("report", flag.ContinueOnError)
	budget := flags.Duration("budget", 45*time.Minute, "the most .ci/run may take, start to end")
	start := flags.Float64("start", 0, "when .ci/run started, in Unix seconds (0: the first step's start)")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if dir == "" {
		fmt.Fprintln(os.Stderr, "timetable report: $TIMETABLE names no directory")
		return 2
	}
	steps, err := readSteps(filepath.Join(dir, "steps.tsv"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "timetable report: %v\n", err)
		return 2
	}
	pkgs, err := readPackages(filepath.Join(dir, "packages.tsv"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "timetable report: %v\n", err)
		return 2
	}
	if *start == 0 && len(steps) > 0 {
		*start = steps[0].Start
	}
	total := time.Since(time.Unix(0, int64(*start*1e9))).Round(time.Second)
	printTable(os.Stdout, steps, pkgs, total, *budget)
	// The machine is shared: the load says how much of it this run had.
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("== timetable: load average at the end (1, 5, 15 min): %s\n", strings.Join(strings.Fields(string(load))[:3], " "))
	}
	if total > *budget {
		return 1
	}
	return 0
}

// readSteps reads steps.tsv, in the order the steps started, each with its
// depth: a step that ran inside another (make test's parts in make test)
// is one deeper.
func readSteps(path string) ([]step, error) {
	lines, err := readTSV(path, 4)
	if err != nil {
		return nil, err
	}
	var steps []step
	for _, f := range lines {
		start, err1 := strconv.ParseFloat(f[0], 64)
		end, err2 := strconv.ParseFloat(f[1], 64)
		rc, err3 := strconv.Atoi(f[2])
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		steps = append(steps, step{Start: start, End: end, RC: rc, Name: f[3]})
	}
	return nestSteps(steps), nil
}

// nestSteps orders steps by start, an enclosing step before the steps it
// contains, and sets each one's depth.
func nestSteps(steps []step) []step {
	// Steps are written when they end, so an enclosing step comes after
	// its parts: at an equal start, the one written last encloses.
	slices.Reverse(steps)
	slices.SortStableFunc(steps, func(a, b step) int { return cmp.Compare(a.Start, b.Start) })
	var open []step
	for i := range steps {
		for len(open) > 0 && open[len(open)-1].End < steps[i].End {
			open = open[:len(open)-1]
		}
		steps[i].Depth = len(open)
		open = append(open, steps[i])
	}
	return steps
}

// readPackages reads packages.tsv, slowest package first.
func readPackages(path string) ([]packageRow, error) {
	lines, err := readTSV(path, 6)
	if err != nil {
		return nil, err
	}
	var rows []packageRow
	for _, f := range lines {
		wall, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		r := packageRow{Package: f[0], Result: f[1], Wall: wall, Cached: f[5] == "true"}
		if f[3] != "-" {
			user, err1 := strconv.ParseFloat(f[3], 64)
			sys, err2 := strconv.ParseFloat(f[4], 64)
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			r.User, r.Sys, r.HasCPU = user, sys, true
		}
		rows = append(rows, r)
	}
	slices.SortStableFunc(rows, func(a, b packageRow) int { return cmp.Compare(b.Wall, a.Wall) })
	return rows, nil
}

// readTSV reads a file of tab-separated lines of n fields; a file that is
// not there has no lines (nothing got that far).
func readTSV(path string, n int) ([][]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), "\t", n)
		if len(fields) != n {
			return nil, fmt.Errorf("%s: %q has %d fields, want %d", path, sc.Text(), len(fields), n)
		}
		lines = append(lines, fields)
	}
	return lines, sc.Err()
}

// printTable writes the steps (in order, indented by depth), the packages
// (slowest first) and the verdict on the budget.
func printTable(w io.Writer, steps []step, pkgs []packageRow, total, budget time.Duration) {
	fmt.Fprintf(w, "\n== timetable: steps (wall seconds)\n")
	for _, s := range steps {
		result := "ok"
		if s.RC != 0 {
			result = fmt.Sprintf("FAILED (exit %d)", s.RC)
		}
		fmt.Fprintf(w, "%6.0f  %-60s %s\n", s.End-s.Start, strings.Repeat("  ", s.Depth)+s.Name, result)
	}
	fmt.Fprintf(w, "\n== timetable: test packages, slowest first (wall: the test binary's run; CPU: user+sys of it and the processes it started and reaped)\n")
	fmt.Fprintf(w, "%8s %8s %8s %8s  %-6s %s\n", "wall s", "CPU s", "user s", "sys s", "result", "package")
	var wall, cpu float64
	for _, r := range pkgs {
		cpuText, userText, sysText := "-", "-", "-"
		if r.HasCPU {
			cpuText = fmt.Sprintf("%.1f", r.User+r.Sys)
			userText, sysText = fmt.Sprintf("%.1f", r.User), fmt.Sprintf("%.1f", r.Sys)
		}
		result := r.Result
		if r.Cached {
			result = "cached" // the times are the cached run's
		} else {
			wall += r.Wall
			cpu += r.User + r.Sys
		}
		fmt.Fprintf(w, "%8.1f %8s %8s %8s  %-6s %s\n", r.Wall, cpuText, userText, sysText, result, r.Package)
	}
	fmt.Fprintf(w, "%8.1f %8.1f %17s  %-6s %d packages run (cached ones not summed)\n", wall, cpu, "", "sum", len(pkgs))
	verdict := "within the budget"
	if total > budget {
		verdict = "OVER THE BUDGET: .ci/run fails"
	}
	fmt.Fprintf(w, "\n== timetable: total %d s of a %d s budget: %s\n", int(total.Seconds()), int(budget.Seconds()), verdict)
}
