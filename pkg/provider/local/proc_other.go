//go:build !linux

package local

import (
	"errors"
	"syscall"
)

var errNotLinux = errors.New("the local provider needs Linux (/proc tells its processes from others reusing their pids)")

func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

var testProcAttr func(*syscall.SysProcAttr)

func readProcStat(int) (uint64, byte, error) { return 0, 0, errNotLinux }

func readBootID() (string, error) { return "", errNotLinux }

func (p *Provider) ours(state) (bool, error) { return false, errNotLinux }
