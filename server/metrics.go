package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cohortlabs/cohort/fsm"
)

// groupStateCollector reports how many groups are in each state, read from
// the FSM at scrape time.
type groupStateCollector struct {
	f    *fsm.FSM
	desc *prometheus.Desc
}

func newGroupStateCollector(f *fsm.FSM) *groupStateCollector {
	return &groupStateCollector{f: f, desc: prometheus.NewDesc("cohort_groups", "Consumer groups by state.", []string{"state"}, nil)}
}

func (c *groupStateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *groupStateCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[fsm.GroupState]int{}
	c.f.Read(func(s *fsm.State) {
		for _, g := range s.Groups() {
			counts[g.State]++
		}
	})
	for _, st := range []fsm.GroupState{fsm.Empty, fsm.PreparingRebalance, fsm.CompletingRebalance, fsm.Stable} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[st]), st.String())
	}
}
