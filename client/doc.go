// Package client is the Go library a Cohort consumer uses: a Member runs a
// group member's whole life (join, leader-side assignment, sync, heartbeat,
// rebalance callbacks, commit, leave) against a Cohort cluster, and a Conn
// is the endpoint-aware gRPC connection underneath it.
//
// The property the package exists to keep: a coordinator failover never costs
// a member its member ID or its generation. Every request that fails with
// NOT_LEADER or Unavailable is retried unchanged (same member ID, same
// generation) on the next endpoint or on the leader the cluster names in its
// `cohort-leader` header; the server makes those retries idempotent.
//
// What it must never do: depend on anything but gen/, errcode (the protocol
// error codes, shared with the server) and the assignors; retry a request
// the server refused for a protocol reason that errcode does not call
// retriable; call the OnAssigned / OnRevoked callbacks from more than one
// goroutine or out of order; wait on anything without a context.
package client
