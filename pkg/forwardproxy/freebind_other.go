//go:build !linux

package forwardproxy

import (
	"errors"
	"syscall"
)

// setFreebind: exit ranges need Linux's IP_FREEBIND.
func setFreebind(string, syscall.RawConn) error {
	return errors.New("exit ranges need Linux (IP_FREEBIND)")
}
