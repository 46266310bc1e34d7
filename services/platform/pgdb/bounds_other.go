//go:build !linux

package pgdb

import "syscall"

// setUserTimeout does nothing where TCP_USER_TIMEOUT is Linux's alone: the server's
// tcp_user_timeout and both ends' keepalives still bound the link.
func setUserTimeout(string, string, syscall.RawConn) error { return nil }
