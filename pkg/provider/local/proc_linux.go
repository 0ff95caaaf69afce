package local

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr detaches the process: a session of its own (no controlling
// terminal, no signals aimed at the operator's process group) and no
// parent-death signal, so it outlives the operator. Tests add a parent-death
// signal through testProcAttr so that a crashed test leaves no process.
func sysProcAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setsid: true}
	if testProcAttr != nil {
		testProcAttr(attr)
	}
	return attr
}

// testProcAttr, set only by tests, adjusts sysProcAttr's result.
var testProcAttr func(*syscall.SysProcAttr)

// readProcStat returns the start time (field 22, clock ticks after boot) and
// the state letter (field 3) of pid from /proc/<pid>/stat.
func readProcStat(pid int) (startTime uint64, state byte, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces and
	// parentheses itself: the fields after it start after the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	const stateField, startTimeField = 3, 22 // 1-based, as in proc(5)
	if len(fields) < startTimeField-2 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(fields))
	}
	startTime, err = strconv.ParseUint(fields[startTimeField-3], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return startTime, fields[stateField-3][0], nil
}

// readBootID identifies this boot of the machine.
func readBootID() (string, error) {
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("reading the boot id (the local provider needs Linux /proc): %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// ours reports whether the process recorded in st still runs: same boot,
// same pid, same start time, and not a zombie. A pid that now belongs to
// another process is not ours. An error means /proc could not tell.
func (p *Provider) ours(st state) (bool, error) {
	if st.PID <= 0 || (st.BootID != "" && st.BootID != p.bootID) {
		return false, nil
	}
	startTime, procState, err := readProcStat(st.PID)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("local provider: checking process %d: %w", st.PID, err)
	}
	if procState == 'Z' || procState == 'X' {
		return false, nil // exited, not yet reaped
	}
	return startTime == st.ProcessStartTime, nil
}
