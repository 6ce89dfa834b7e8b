// Package cluster runs the operations around one Raft replica
// (raftnode.Node) that make a set of nodes one cluster: formation
// (--bootstrap, --bootstrap-expect polling the join addresses), joining a
// running cluster and noticing a removal (membership.go), the replicated
// node registry that maps server IDs to gRPC addresses and follows a node
// whose Raft address changed (registry.go), the leader's health probes
// (probes.go), membership changes that are safe by default (admin.go), the
// cluster status (status.go) and the leader's autopilot (autopilot.go,
// hashicorp/raft-autopilot).
//
// It speaks to other nodes through the Peers interface in plain Go types;
// the rpc package implements it over gRPC and serves these operations as
// cohort.v1.ClusterService. Refusals are errcode errors (UNKNOWN_SERVER,
// SERVER_LAGGING, QUORUM_AT_RISK, LAST_VOTER, CONFIGURATION_CONFLICT,
// AUTOPILOT_MANAGED, INVALID_ARGUMENT) or raftnode's ErrNotLeader.
//
// What it must never do: change FSM state other than through
// raftnode.Node.Apply, import the wire types, or wait on anything without
// a context or deadline.
package cluster
