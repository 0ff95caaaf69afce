//go:build !linux

package proxytest

import (
	"syscall"
	"testing"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func reserveClosedPort(testing.TB) (int, bool) { return 0, false }
