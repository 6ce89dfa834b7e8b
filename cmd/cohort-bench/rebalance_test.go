package main

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRebalance_FormsInWavesAndMeasuresEachRound runs the rebalance
// command at a tiny size, the group formed in waves smaller than it, with
// the watch on and off: one row per size and mode, every round exactly one
// new generation, latencies and CPU per member measured (not zero), and
// the watch's round faster than the heartbeat interval it spares.
func TestRebalance_FormsInWavesAndMeasuresEachRound(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and a group")
	}
	doc := runBenchJSON(t, "rebalance",
		"--sizes", "5", "--form-wave", "2", "--rounds", "2", "--watch", "on,off",
		"--heartbeat-interval", "2s", "--session-timeout", "10s", "--partitions", "16")
	if len(doc.Tables) != 1 || len(doc.Tables[0].Rows) != 2 {
		t.Fatalf("want one table with a row per watch mode, got %+v", doc.Tables)
	}
	tb := doc.Tables[0]
	ms := func(cell string) time.Duration {
		v, err := strconv.ParseFloat(strings.TrimSuffix(cell, " ms"), 64)
		if err != nil {
			t.Fatalf("cell %q is not milliseconds", cell)
		}
		return time.Duration(v * float64(time.Millisecond))
	}
	medians := map[string]time.Duration{}
	for _, row := range tb.Rows {
		if tb.cell(t, row, "members") != "5" || tb.cell(t, row, "generations/round") != "1.0" {
			t.Errorf("row %q: want 5 members and exactly one generation per round", row)
		}
		tb.positive(t, row, "CPU/member", "median")
		medians[tb.cell(t, row, "watch")] = ms(tb.cell(t, row, "median"))
	}
	// Watching members hear of the join at once; heartbeating ones at
	// their next heartbeat, on average a second later here.
	if medians["on"] >= time.Second || medians["on"] >= medians["off"] {
		t.Errorf("watch on median %v, off %v: want on under the 2 s heartbeat interval and below off", medians["on"], medians["off"])
	}
}
