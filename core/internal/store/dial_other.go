//go:build !linux

package store

import "net"

// dialer is pgconn's default dialer where TCP_USER_TIMEOUT does not exist.
func dialer() *net.Dialer { return &net.Dialer{KeepAlive: keepAlive} }
