package store

import (
	"fmt"
	"net"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// dialer sets TCP_USER_TIMEOUT on every TCP connection it makes.
func dialer() *net.Dialer {
	return &net.Dialer{KeepAlive: keepAlive, Control: func(network, _ string, c syscall.RawConn) error {
		if !strings.HasPrefix(network, "tcp") {
			return nil
		}
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(TCPUserTimeout.Milliseconds()))
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("set TCP_USER_TIMEOUT: %w", serr)
		}
		return nil
	}}
}
