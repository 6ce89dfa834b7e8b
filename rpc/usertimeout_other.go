//go:build !linux

package rpc

import (
	"net"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist (gRPC
// sets it on Linux only).
func setUserTimeout(net.Conn, time.Duration) error { return nil }
