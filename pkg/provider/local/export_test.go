package local

import "syscall"

// KillChildrenWithTestBinary gives the processes this test binary starts a
// parent-death signal, so that a crashed or timed-out test leaves none
// behind on a shared machine. Production processes have none (see
// TestSysProcAttrDetaches); the test of that runs them from a helper process.
func KillChildrenWithTestBinary() {
	testProcAttr = func(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
}

// ProcessStartTime is field 22 of /proc/<pid>/stat.
func ProcessStartTime(pid int) (uint64, error) {
	start, _, err := readProcStat(pid)
	return start, err
}

// BootID is this boot's id, as recorded in state files.
var BootID = readBootID
