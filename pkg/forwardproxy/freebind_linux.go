package forwardproxy

import (
	"fmt"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// setFreebind lets the socket bind an address no interface has.
func setFreebind(network string, c syscall.RawConn) error {
	level, opt := unix.SOL_IP, unix.IP_FREEBIND
	if strings.HasSuffix(network, "6") {
		level, opt = unix.SOL_IPV6, unix.IPV6_FREEBIND
	}
	var serr error
	if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, 1) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("setting freebind for an exit address: %w", serr)
	}
	return nil
}
