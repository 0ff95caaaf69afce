package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// cpuMarker starts the line exec prints after the test binary exits; the
// go-test side takes it out of the output and into the package's row.
const cpuMarker = "timetable-cpu:"

// execTestBinary runs a test binary as go test's -exec program: with the
// same arguments, output and working directory, passing on the signals go
// test sends (SIGQUIT on a timeout), and exits with its code. Once it has
// exited, it prints the CPU the binary and its reaped descendants used.
func execTestBinary(args []string, stdout io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "timetable exec: no test binary")
		return 2
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stdout
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "timetable exec: %v\n", err)
		return 2
	}
	go func() {
		for s := range signals {
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	signal.Stop(signals)
	if cmd.ProcessState != nil {
		user, sys := childCPU(cmd.ProcessState)
		fmt.Fprintf(stdout, "%s user=%.3f sys=%.3f\n", cpuMarker, user.Seconds(), sys.Seconds())
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exitErr):
		if status, ok := exitErr.Sys().(syscall.WaitStatus); ok && status.Signaled() {
			return 128 + int(status.Signal())
		}
		return exitErr.ExitCode()
	default:
		fmt.Fprintf(os.Stderr, "timetable exec: %v\n", err)
		return 2
	}
}

// childCPU is the user and system time wait4 reported for a reaped child:
// on Linux its own and that of every descendant it waited for.
func childCPU(state *os.ProcessState) (user, sys time.Duration) {
	return state.UserTime(), state.SystemTime()
}

// parseCPUMarker finds the marker exec printed in a line of output (at its
// end, after a test binary that died mid-line); before is the line's text
// ahead of it. ok is false for a line without one.
func parseCPUMarker(line string) (before string, user, sys float64, ok bool) {
	i := strings.Index(line, cpuMarker)
	if i < 0 {
		return line, 0, 0, false
	}
	n, err := fmt.Sscanf(line[i:], cpuMarker+" user=%g sys=%g", &user, &sys)
	return line[:i], user, sys, err == nil && n == 2
}
