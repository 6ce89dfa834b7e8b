// Package raftnode runs one Cohort server's Raft replica: hashicorp/raft
// with its log and stable store in one raft-boltdb/v2 file, a file snapshot
// store, a TCP transport, the node's persisted identity, cluster formation
// (--bootstrap, --bootstrap-expect with --join) and the node registry
// entry that lets other nodes find this node's gRPC address.
//
// It also owns cluster operations (admin.go, cluster_service.go): the
// cohort.v1.ClusterService with its admin token check and forwarding to
// the leader; membership changes that are safe by default (non-voters
// first, promotion only when caught up, quorum checks, leadership handed
// over before the leader is changed, idempotent); joining a running cluster
// and stopping once removed (membership.go); the leader's autopilot
// (autopilot.go, hashicorp/raft-autopilot); snapshot save and restore of the
// whole state (snapshot.go); and offline recovery from a lost quorum
// (recover.go).
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
