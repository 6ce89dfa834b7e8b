package rpc

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A connection the gRPC port accepts has TCP_USER_TIMEOUT set to the
// keepalive timeout, as gRPC sets it on the bare connections it accepts
// itself: the limiter's wrapping would otherwise leave it unset (0, the
// kernel's retransmission timeout of about 15 minutes).
func TestConnLimiter_SetsTCPUserTimeout(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limits := DefaultLimits()
	limits.KeepaliveTimeout = 7 * time.Second
	cl := LimitConnections(lis, limits, slog.New(slog.DiscardHandler))
	defer cl.Close()
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, err := cl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	raw, err := sc.(*limitedConn).Conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		got, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if got != 7000 {
		t.Fatalf("TCP_USER_TIMEOUT = %d ms, want 7000 (the keepalive timeout)", got)
	}
}
