package raftnode

import (
	"errors"
	"strconv"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds what the node measures itself. Gauges that raft or the FSM
// already know (state, term, indexes, sizes) are read at scrape time by the
// Collector rather than copied on every change.
type metrics struct {
	applyLatency            prometheus.Histogram
	commitLatency           prometheus.Histogram
	snapshotPersistDuration prometheus.Histogram
	snapshotSize            prometheus.Histogram
	restoreDuration         prometheus.Histogram
	leadershipChanges       prometheus.Counter
	applyErrors             *prometheus.CounterVec
	writeErrors             *prometheus.CounterVec
	sizeSnapshots           prometheus.Counter
	staleVerifies           prometheus.Counter

	lastSnapshotBytes atomic.Int64
}

// latencyBuckets spans loopback commits (~100µs) to a slow disk under load.
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

func newMetrics() *metrics {
	return &metrics{
		applyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "cohort", Subsystem: "raft", Name: "apply_duration_seconds",
			Help:    "Time Node.Apply took on the leader: encode, replicate, commit and FSM apply.",
			Buckets: latencyBuckets,
		}),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "cohort", Subsystem: "raft", Name: "commit_duration_seconds",
			Help:    "Time from handing an entry to raft until its future resolved (committed and applied), like raft.commitTime.",
			Buckets: latencyBuckets,
		}),
		snapshotPersistDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "cohort", Subsystem: "raft", Name: "snapshot_persist_duration_seconds",
			Help:    "Time to serialise an FSM snapshot into the snapshot store.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		snapshotSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "cohort", Subsystem: "raft", Name: "snapshot_size_bytes",
			Help:    "Size of persisted FSM snapshots.",
			Buckets: prometheus.ExponentialBuckets(1024, 4, 12),
		}),
		restoreDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "cohort", Subsystem: "raft", Name: "restore_duration_seconds",
			Help:    "Time to restore the FSM from a snapshot (on start or InstallSnapshot).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		leadershipChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cohort", Subsystem: "raft", Name: "leadership_changes_total",
			Help: "Times this node gained or lost leadership.",
		}),
		applyErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cohort", Subsystem: "raft", Name: "apply_errors_total",
			Help: "Node.Apply calls that failed before a result, by reason.",
		}, []string{"reason"}),
		writeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cohort", Subsystem: "raft", Name: "write_errors_total",
			Help: "Failed writes of the raft log (append, delete) and of snapshots, by write.",
		}, []string{"write"}),
		sizeSnapshots: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cohort", Subsystem: "raft", Name: "size_triggered_snapshots_total",
			Help: "Snapshots started because the log passed --raft-snapshot-log-bytes since the last one.",
		}),
		staleVerifies: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cohort", Subsystem: "raft", Name: "verify_leader_stale_rounds_total",
			Help: "Leadership checks raft vouched for with answers to requests sent before the check began (not trusted; asked again).",
		}),
	}
}

// Collector exports a Node's Raft and FSM metrics. Register it in the
// registry behind /metrics.
type Collector struct {
	n *Node

	state, term, commitIndex, appliedIndex, fsmAppliedIndex, lastIndex, lastSnapshotIndex,
	lastSnapshotBytes, lastContact, voters, restores, commandRules,
	fault, logCacheBytes, logCacheEntries, logBytesSinceSnapshot,
	topics, groups, members, offsets, nodes,
	raftConns, raftConnsRefused, raftConnsIdleClosed, raftHandshakesRefused *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

func newCollector(n *Node) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, prometheus.Labels{"node_id": n.id})
	}
	return &Collector{
		n:                 n,
		state:             d("cohort_raft_state", "1 for the node's current Raft state, 0 for the others.", "state"),
		term:              d("cohort_raft_term", "Current Raft term."),
		commitIndex:       d("cohort_raft_commit_index", "Highest log index known to be committed."),
		appliedIndex:      d("cohort_raft_applied_index", "Highest log index handed to the FSM."),
		fsmAppliedIndex:   d("cohort_fsm_applied_index", "Index of the last command the FSM applied (or its restored snapshot)."),
		lastIndex:         d("cohort_raft_last_log_index", "Index of the last entry in the node's log."),
		lastSnapshotIndex: d("cohort_raft_last_snapshot_index", "Index covered by the newest snapshot."),
		lastSnapshotBytes: d("cohort_raft_last_snapshot_size_bytes", "Size of the last snapshot this node persisted."),
		lastContact:       d("cohort_raft_last_contact_seconds", "Seconds since a follower last heard from the leader (0 on the leader)."),
		voters:            d("cohort_raft_voters", "Voters in the latest Raft configuration."),
		restores:          d("cohort_raft_restores_total", "FSM restores from a snapshot since start."),
		commandRules: d("cohort_command_rules", "Command rules: those this node writes entries under (the oldest any server applies) and the newest its binary applies.",
			"kind"),
		fault:                 d("cohort_raft_fault", "1 when the node is unfit to serve for this reason (Node.Fault, /readyz), 0 otherwise.", "fault"),
		logCacheBytes:         d("cohort_raft_log_cache_bytes", "Bytes of log entries held by the in-memory log cache (bound: --raft-log-cache-bytes)."),
		logCacheEntries:       d("cohort_raft_log_cache_entries", "Log entries held by the in-memory log cache."),
		logBytesSinceSnapshot: d("cohort_raft_log_bytes_since_snapshot", "Bytes appended to the log since the last snapshot (a snapshot is due at --raft-snapshot-log-bytes)."),
		topics:                d("cohort_fsm_topics", "Topics in the FSM."),
		groups:                d("cohort_fsm_groups", "Consumer groups in the FSM."),
		members:               d("cohort_fsm_members", "Group members in the FSM."),
		offsets:               d("cohort_fsm_offsets", "Committed offsets in the FSM."),
		nodes:                 d("cohort_fsm_nodes", "Nodes in the FSM's node registry."),
		raftConns:             d("cohort_raft_inbound_connections", "Inbound connections open on the Raft port (at most --raft-max-conns)."),
		raftConnsRefused:      d("cohort_raft_inbound_connections_refused_total", "Inbound Raft connections closed at accept because --raft-max-conns were open."),
		raftConnsIdleClosed: d("cohort_raft_inbound_connections_idle_closed_total",
			"Inbound Raft connections closed after --raft-idle-timeout without a byte from the peer."),
		raftHandshakesRefused: d("cohort_raft_inbound_handshakes_refused_total",
			"Inbound Raft connections closed because their TLS handshake failed, did not finish within the handshake timeout, or the peer was not a node of the Raft configuration."),
	}
}

func (c *Collector) histograms() []prometheus.Collector {
	m := c.n.metrics
	return []prometheus.Collector{m.applyLatency, m.commitLatency, m.snapshotPersistDuration, m.snapshotSize,
		m.restoreDuration, m.leadershipChanges, m.applyErrors, m.writeErrors, m.sizeSnapshots, m.staleVerifies}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.state, c.term, c.commitIndex, c.appliedIndex, c.fsmAppliedIndex,
		c.lastIndex, c.lastSnapshotIndex, c.lastSnapshotBytes, c.lastContact, c.voters, c.restores, c.commandRules,
		c.fault, c.logCacheBytes, c.logCacheEntries, c.logBytesSinceSnapshot,
		c.topics, c.groups, c.members, c.offsets, c.nodes, c.raftConns, c.raftConnsRefused, c.raftConnsIdleClosed, c.raftHandshakesRefused} {
		ch <- d
	}
	for _, h := range c.histograms() {
		h.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	state := n.raft.State()
	for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		v := 0.0
		if s == state {
			v = 1
		}
		gauge(c.state, v, s.String())
	}
	gauge(c.term, float64(n.raft.CurrentTerm()))
	gauge(c.commitIndex, float64(n.raft.CommitIndex()))
	gauge(c.appliedIndex, float64(n.raft.AppliedIndex()))
	gauge(c.fsmAppliedIndex, float64(n.fsm.AppliedIndex()))
	gauge(c.lastIndex, float64(n.raft.LastIndex()))
	stats := n.raft.Stats()
	if v, err := strconv.ParseUint(stats["last_snapshot_index"], 10, 64); err == nil {
		gauge(c.lastSnapshotIndex, float64(v))
	}
	gauge(c.lastSnapshotBytes, float64(n.metrics.lastSnapshotBytes.Load()))
	if state == raft.Leader {
		gauge(c.lastContact, 0)
	} else if lc := n.raft.LastContact(); !lc.IsZero() {
		gauge(c.lastContact, n.now().Sub(lc).Seconds())
	}
	gauge(c.voters, float64(n.voterCount()))
	gauge(c.commandRules, float64(n.CommandRules()), "writes")
	gauge(c.commandRules, float64(n.MaxCommandRules()), "applies")
	ch <- prometheus.MustNewConstMetric(c.restores, prometheus.CounterValue, float64(n.adapter.restores.Load()))
	fault := n.Fault()
	for _, f := range []struct {
		name string
		err  error
	}{{"log_write", ErrLogWriteFailing}, {"snapshot", ErrSnapshotFailing}, {"lag", ErrLagging}, {"leader_contact", ErrNoLeaderContact}} {
		v := 0.0
		if errors.Is(fault, f.err) {
			v = 1
		}
		gauge(c.fault, v, f.name)
	}
	entries, bytes := n.logCache.stats()
	gauge(c.logCacheBytes, float64(bytes))
	gauge(c.logCacheEntries, float64(entries))
	gauge(c.logBytesSinceSnapshot, float64(max(n.logBytes.Load(), 0)))
	fs := n.fsm.Stats()
	gauge(c.topics, float64(fs.Topics))
	gauge(c.groups, float64(fs.Groups))
	gauge(c.members, float64(fs.Members))
	gauge(c.offsets, float64(fs.Offsets))
	gauge(c.nodes, float64(fs.Nodes))
	gauge(c.raftConns, float64(n.stream.OpenConns()))
	ch <- prometheus.MustNewConstMetric(c.raftConnsRefused, prometheus.CounterValue, float64(n.stream.RefusedConns()))
	ch <- prometheus.MustNewConstMetric(c.raftConnsIdleClosed, prometheus.CounterValue, float64(n.stream.IdleClosedConns()))
	ch <- prometheus.MustNewConstMetric(c.raftHandshakesRefused, prometheus.CounterValue, float64(n.stream.RefusedHandshakes()))
	for _, h := range c.histograms() {
		h.Collect(ch)
	}
}
