// Package coordinator is the Raft leader's group engine: the part of the
// consumer-group protocol that must not be replicated. It holds member
// session deadlines (heartbeats are never log entries), rebalance and
// initial-delay deadlines, pending member IDs (MEMBER_ID_REQUIRED), and the
// parked JoinGroup and SyncGroup calls waiting at their barriers.
//
// It runs only while this node leads: on gaining leadership it waits for a
// Raft barrier (its FSM holds everything the old leader committed), re-arms
// every deadline from the FSM, and only then serves; on losing leadership it
// answers every parked call NOT_LEADER at once. Every state change is a
// command proposed through Raft — timer events included — and never applied
// locally. The FSM is the authority on the protocol rules; the engine checks
// early only what is not the FSM's (limits, session-timeout bounds, pending
// IDs) and decides when to answer.
//
// It knows Raft only through its Raft interface and a channel of leadership
// changes (Run), and never imports raftnode: server wires the two together.
package coordinator
