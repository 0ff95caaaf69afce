// Package procstat reads a process's CPU time (Linux's /proc/PID/stat) and
// resident memory (/proc/PID/status), for the tests and bench programs that
// measure another process (or themselves). It is not a portable process
// API.
package procstat

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times (100 on
// every Linux this runs on).
const clockTicks = 100

// CPU is the user+system CPU time of every thread of pid so far.
func CPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	d, err := parseCPU(string(data))
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return d, nil
}

// parseCPU reads utime and stime, fields 14 and 15 of a /proc/PID/stat
// line. The command name (field 2, in parentheses) may hold spaces and
// parentheses, so the fields are counted from its last ')'.
func parseCPU(line string) (time.Duration, error) {
	end := strings.LastIndexByte(line, ')')
	if end < 0 || end+2 > len(line) {
		return 0, fmt.Errorf("no command name in %q", line)
	}
	fields := strings.Fields(line[end+2:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("utime %q, stime %q: not numbers", fields[11], fields[12])
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// RSS is pid's resident set size in bytes (VmRSS): what the kernel counts
// against a container's memory limit, freed Go heap not yet returned to it
// included.
func RSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	rss, err := parseRSS(bufio.NewScanner(f))
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	return rss, nil
}

// parseRSS finds the "VmRSS:  1234 kB" line of a /proc/PID/status.
func parseRSS(lines *bufio.Scanner) (int64, error) {
	for lines.Scan() {
		name, value, ok := strings.Cut(lines.Text(), ":")
		if !ok || name != "VmRSS" {
			continue
		}
		kb, unit, _ := strings.Cut(strings.TrimSpace(value), " ")
		n, err := strconv.ParseInt(kb, 10, 64)
		if err != nil || unit != "kB" {
			return 0, fmt.Errorf("VmRSS %q: want a number of kB", value)
		}
		return n << 10, nil
	}
	if err := lines.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no VmRSS line (a kernel thread, or a zombie)")
}
