// Package raftnode runs one Cohort server's Raft replica: hashicorp/raft
// with its log and stable store in one raft-boltdb/v2 file, a file snapshot
// store, a TCP transport, the node's persisted identity, cluster formation
// (--bootstrap, --bootstrap-expect with --join) and the node registry
// entry that lets other nodes find this node's gRPC address.
//
// It owns the adapter between raft.FSM and the pure *fsm.FSM: commands are
// protobuf fsmv1.Command values, applied through Node.Apply, which returns
// the FSM's typed *fsm.ApplyResult. Leadership is observable without losing
// transitions (Node.SubscribeLeadership), and the node exports Prometheus
// metrics for the replica and the FSM's size.
//
// What it must never do: change FSM state other than through the Raft log,
// interpret group-protocol semantics (that is the coordinator's job), block
// raft's FSM goroutine on I/O other than the snapshot stream, or wait on
// anything without a context or deadline.
package raftnode
