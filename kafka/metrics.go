package kafka

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the Kafka listener; registered by Collectors.
type metrics struct {
	requests        *prometheus.HistogramVec
	conns           prometheus.Gauge
	refusedConns    prometheus.Counter
	refusedRequests prometheus.Counter
	inFlightBytes   prometheus.Gauge
}

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "cohort", Subsystem: "kafka", Name: "request_duration_seconds",
			Help:    "Kafka requests served, by API, and how long they took (a JoinGroup waits for its rebalance, a Fetch for its max wait).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"api"}),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "cohort", Subsystem: "kafka", Name: "connections",
			Help: "Open Kafka client connections.",
		}),
		refusedConns: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cohort", Subsystem: "kafka", Name: "refused_connections_total",
			Help: "Kafka connections closed at once because the listener had its maximum open.",
		}),
		refusedRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cohort", Subsystem: "kafka", Name: "refused_requests_total",
			Help: "Kafka requests that closed their connection: oversized, malformed, an API or version not served, or not admitted within the request timeout.",
		}),
		inFlightBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "cohort", Subsystem: "kafka", Name: "request_bytes_in_flight",
			Help: "Bytes of the Kafka requests being read or served, against the listener's max in-flight bytes.",
		}),
	}
}

func (m *metrics) observe(api string, d time.Duration) {
	m.requests.WithLabelValues(api).Observe(d.Seconds())
}

// Collectors returns the listener's metrics for registration.
func (s *Server) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.m.requests, s.m.conns, s.m.refusedConns, s.m.refusedRequests, s.m.inFlightBytes}
}
