package coordinator

import (
	"github.com/cohortlabs/cohort/fsm"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the engine; registered by Collectors.
type metrics struct {
	heartbeats       prometheus.Counter
	expirations      prometheus.Counter
	rebalances       prometheus.Counter
	rebalanceSeconds prometheus.Histogram
	joinLatency      prometheus.Histogram
	fencedCommits    *prometheus.CounterVec
	parked           *prometheus.GaugeVec
	watches          prometheus.Gauge
	commitStages     *prometheus.HistogramVec
	syncExpirations  prometheus.Counter
	refusedPlans     prometheus.Counter
	commitBatch      prometheus.Histogram
	refusedBeforeLog prometheus.Counter
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
		syncExpirations: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cohort", Subsystem: "group", Name: "sync_expirations_total",
			Help: "Members removed because they had not synced when their group's rebalance timeout passed in CompletingRebalance.",
		}),
		refusedPlans: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cohort", Subsystem: "group", Name: "assignments_refused_total",
			Help: "Group leaders' plans (SyncGroup) the FSM refused as INVALID_ASSIGNMENT.",
		}),
		parked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "cohort", Subsystem: "group", Name: "parked_calls",
			Help: "JoinGroup and SyncGroup calls waiting at a barrier.",
		}, []string{"kind"}),
		commitStages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "cohort", Subsystem: "group", Name: "commit_stage_seconds",
			Help: "Where an accepted offset commit's time goes on the leader, by stage: admit (checks and the FSM's admission), " +
				"queue (waiting for a proposer), replicate (its entry's Raft apply: replication, fsync, FSM), " +
				"wake (from the result to its caller running again), engine (the whole engine call).",
			Buckets: prometheus.ExponentialBuckets(5e-6, 2, 18),
		}, []string{"stage"}),
		watches: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "cohort", Subsystem: "group", Name: "watches",
			Help: "Members watching their group (WatchGroup) on this leader, to hear of a rebalance at once.",
		}),
		commitBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "cohort", Subsystem: "group", Name: "commit_batch_size",
			Help:    "Offset commits coalesced into one Raft entry (batches of two or more).",
			Buckets: prometheus.ExponentialBuckets(2, 2, 9),
		}),
		refusedBeforeLog: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cohort", Subsystem: "group", Name: "refused_before_log_total",
			Help: "Commands the FSM's admission check refused on the leader, so never written to the log.",
		}),
	}
}

// budgetCollector reports each replicated budget and how much of it the
// state uses (per-group budgets: the largest group's use).
type budgetCollector struct {
	f           *fsm.FSM
	used, limit *prometheus.Desc
	pending     *prometheus.Desc
	e           *Engine
}

func newBudgetCollector(e *Engine) *budgetCollector {
	return &budgetCollector{
		f: e.fsm, e: e,
		used:    prometheus.NewDesc("cohort_budget_used", "How much of a replicated budget the state uses (per-group budgets: the largest group).", []string{"budget"}, nil),
		limit:   prometheus.NewDesc("cohort_budget_limit", "A replicated budget (0: none set).", []string{"budget"}, nil),
		pending: prometheus.NewDesc("cohort_group_pending_members", "Member IDs this leader handed out with MEMBER_ID_REQUIRED that are not yet used to join.", nil, nil),
	}
}

func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.used
	ch <- c.limit
	ch <- c.pending
}

func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	u, b := c.f.Usage()
	for _, f := range fsm.BudgetFields() {
		ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(*f.Value(&u)), f.Name)
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(*f.Value(&b)), f.Name)
	}
	c.e.mu.Lock()
	n := len(c.e.pending)
	c.e.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(n))
}

// Collectors returns the engine's metrics for registration.
func (e *Engine) Collectors() []prometheus.Collector {
	m := e.m
	return []prometheus.Collector{m.heartbeats, m.expirations, m.rebalances, m.rebalanceSeconds, m.joinLatency, m.fencedCommits, m.parked, m.watches, m.commitStages, m.syncExpirations, m.refusedPlans, m.commitBatch,
		m.refusedBeforeLog, newBudgetCollector(e)}
}

// The stages of cohort_group_commit_stage_seconds.
const (
	stageAdmit     = "admit"
	stageQueue     = "queue"
	stageReplicate = "replicate"
	stageWake      = "wake"
	stageEngine    = "engine"
)
