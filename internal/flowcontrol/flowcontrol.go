// Package flowcontrol sets the HTTP/2 flow-control windows of every gRPC
// connection Cohort accepts or makes: the nodes' gRPC port, the Go client,
// the forwarding path and cohortctl.
//
// The windows are static. gRPC's default grows them by estimating the
// link's bandwidth-delay product, and to sample it the receiver of a DATA
// frame sends a PING whenever no sample is running. On a connection that
// carries one small call at a time (a member's commit, heartbeat or watch
// message, milliseconds apart) every message starts a sample, so each
// message in each direction costs a PING and its ack: three writes and
// three reads where one would do. Measured in cohort-bench commits at 16
// callers, the process's write system calls halve with static windows
// (docs/benchmarks.md). Cohort's messages are small except JoinGroup and
// SyncGroup answers of large groups, and gRPC lets a message larger than
// the stream window through when its reader asks for it, so the windows
// only need to cover the bytes in flight at once.
package flowcontrol

import "google.golang.org/grpc"

const (
	// StreamWindow is the bytes one call may have in flight before its
	// reader asks for more: half the member metadata a JoinGroup answer
	// may carry (8 MiB), and gRPC widens it for a larger message once the
	// reader asks for that message.
	StreamWindow = 4 << 20
	// ConnWindow is the bytes one connection may have in flight, every
	// call together: the most gRPC's own estimate would reach.
	ConnWindow = 16 << 20
)

// ServerOptions set a server's windows, static.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StaticStreamWindowSize(StreamWindow), grpc.StaticConnWindowSize(ConnWindow)}
}

// DialOptions set a client's windows, static.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(StreamWindow), grpc.WithStaticConnWindowSize(ConnWindow)}
}
