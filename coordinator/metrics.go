package coordinator

import "github.com/prometheus/client_golang/prometheus"

// metrics of the engine; registered by Collectors.
type metrics struct {
	heartbeats       prometheus.Counter
	expirations      prometheus.Counter
	rebalances       prometheus.Counter
	rebalanceSeconds prometheus.Histogram
	joinLatency      prometheus.Histogram
	fencedCommits    *prometheus.CounterVec
	parked           *prometheus.GaugeVec
	commitBatch      prometheus.Histogram
}

func newMetrics() *metrics {
	return &metrics{
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cohort", Subsystem: "group", Name: "heartbeats_total",
			Help: "Heartbeats answered by this node as leader.",
		}),
		expirations: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cohort", Subsystem: "group", Name: "session_expirations_total",
			Help: "Members removed because their session timed out.",
		}),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cohort", Subsystem: "group", Name: "rebalances_total",
			Help: "Join phases completed (new generations) proposed through this node.",
		}),
		rebalanceSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "cohort", Subsystem: "group", Name: "rebalance_duration_seconds",
			Help:    "From the start of a rebalance to the end of its join phase.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}),
		joinLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "cohort", Subsystem: "group", Name: "join_wait_seconds",
			Help:    "How long JoinGroup calls took, barrier included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}),
		fencedCommits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cohort", Subsystem: "group", Name: "fenced_commits_total",
			Help: "Offset commits (or partitions of one) refused, by reason.",
		}, []string{"reason"}),
		parked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "cohort", Subsystem: "group", Name: "parked_calls",
			Help: "JoinGroup and SyncGroup calls waiting at a barrier.",
		}, []string{"kind"}),
		commitBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "cohort", Subsystem: "group", Name: "commit_batch_size",
			Help:    "Offset commits coalesced into one Raft entry (batches of two or more).",
			Buckets: prometheus.ExponentialBuckets(2, 2, 9),
		}),
	}
}

// Collectors returns the engine's metrics for registration.
func (e *Engine) Collectors() []prometheus.Collector {
	m := e.m
	return []prometheus.Collector{m.heartbeats, m.expirations, m.rebalances, m.rebalanceSeconds, m.joinLatency, m.fencedCommits, m.parked, m.commitBatch}
}
