package proxytest

import (
	"syscall"
	"testing"
)

// sysProcAttr kills children with the test binary, even when it crashes.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// reserveClosedPort binds a TCP socket to 127.0.0.1:0 without listening on
// it and keeps it until cleanup: connections to the port are refused, and
// neither bind (no SO_REUSEADDR here) nor the kernel's choice of ephemeral
// ports for outgoing connections can hand the port to anyone else meanwhile.
func reserveClosedPort(t testing.TB) (int, bool) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Logf("proxytest: socket: %v", err)
		return 0, false
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		t.Logf("proxytest: bind: %v", err)
		return 0, false
	}
	sa, err := syscall.Getsockname(fd)
	in4, ok := sa.(*syscall.SockaddrInet4)
	if err != nil || !ok {
		syscall.Close(fd)
		t.Logf("proxytest: getsockname: %v", err)
		return 0, false
	}
	t.Cleanup(func() { syscall.Close(fd) })
	return in4.Port, true
}
