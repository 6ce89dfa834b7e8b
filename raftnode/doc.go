// Package raftnode runs one Cohort server's Raft replica: hashicorp/raft
// with its log and stable store in one raft-boltdb/v2 file (raft-wal is
// carried but withdrawn: logstore.go), a file snapshot store, a TCP transport, and the node's persisted identity.
//
// It owns the adapter between raft.FSM and the pure *fsm.FSM: commands are
// protobuf fsmv1.Command values, applied through Node.Apply, which names
// every outcome (applied with the FSM's typed *fsm.ApplyResult, not
// proposed, outcome unknown, shut down). Leadership is observable without
// losing transitions (Node.SubscribeLeadership); snapshots of the whole
// state can be opened and restored (snapshot.go); a cluster that lost its
// quorum can be recovered offline (recover.go); the node exports Prometheus
// metrics for the replica and the FSM's size. It says whether it is fit to
// serve (Node.Fault, health.go: failing log or snapshot writes, lag behind
// the leader, lost contact), and bounds its log by bytes: a byte-bounded
// entry cache (logcache.go) and snapshots triggered by the bytes appended.
//
// Everything that involves other nodes by their gRPC address (formation,
// joining, the node registry, membership changes, autopilot) is the
// cluster package's; the gRPC services are the rpc package's.
//
// What it must never do: change FSM state other than through the Raft log,
// interpret group-protocol semantics (that is the coordinator's job), import
// the wire types (gen/cohort/v1), block raft's FSM goroutine on I/O other
// than the snapshot stream, or wait on anything without a context or
// deadline.
package raftnode
