package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cohortlabs/cohort/server"
)

// commitStages reads the leader's cohort_group_commit_stage_seconds: per
// stage, the observations' count and sum so far. Two readings around a
// phase give each stage's mean over the phase: where a commit's time went
// on the leader (the engine's own split of it).
type commitStages map[string]struct {
	count uint64
	sum   float64
}

// stageNames are the stages in the order a commit passes them (engine is
// the whole engine call, the others its parts).
var stageNames = []string{"admit", "queue", "replicate", "wake", "engine"}

func readCommitStages(s *server.Server) (commitStages, error) {
	reg := prometheus.NewPedanticRegistry()
	for _, c := range s.Collectors() {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	out := commitStages{}
	for _, mf := range mfs {
		if mf.GetName() != "cohort_group_commit_stage_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stage" {
					out[l.GetValue()] = struct {
						count uint64
						sum   float64
					}{m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()}
				}
			}
		}
	}
	return out, nil
}

// meanSince is each stage's mean (µs) between an earlier reading and this
// one ("-" for a stage nothing passed).
func (now commitStages) meanSince(before commitStages) map[string]float64 {
	out := map[string]float64{}
	for _, name := range stageNames {
		n := now[name].count - before[name].count
		if n == 0 {
			continue
		}
		out[name] = (now[name].sum - before[name].sum) / float64(n) * 1e6
	}
	return out
}

// leaderServer is the in-process leader (nil for other clusters).
func (t *target) leaderServer() *server.Server {
	if t.inproc == nil {
		return nil
	}
	return t.inproc.Leader()
}
