package main

import (
	"bytes"
	"context"
	"encoding/json"
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
	var out, errOut bytes.Buffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"--json", "--dir", t.TempDir(), "--timeout", "3m", "rebalance",
		"--sizes", "5", "--form-wave", "2", "--rounds", "2", "--watch", "on,off",
		"--heartbeat-interval", "2s", "--session-timeout", "10s", "--partitions", "16"})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("rebalance: %v\n%s", err, errOut.String())
	}
	var doc struct {
		Tables []struct {
			Columns []string
			Rows    [][]string
		}
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("--json output does not parse: %v\n%s", err, out.String())
	}
	if len(doc.Tables) != 1 || len(doc.Tables[0].Rows) != 2 {
		t.Fatalf("want one table with a row per watch mode, got %+v", doc.Tables)
	}
	col := map[string]int{}
	for i, c := range doc.Tables[0].Columns {
		if _, dup := col[c]; !dup {
			col[c] = i
		}
	}
	ms := func(cell string) time.Duration {
		v, err := strconv.ParseFloat(strings.TrimSuffix(cell, " ms"), 64)
		if err != nil {
			t.Fatalf("cell %q is not milliseconds", cell)
		}
		return time.Duration(v * float64(time.Millisecond))
	}
	medians := map[string]time.Duration{}
	for _, row := range doc.Tables[0].Rows {
		if row[col["members"]] != "5" || row[col["generations/round"]] != "1.0" {
			t.Errorf("row %q: want 5 members and exactly one generation per round", row)
		}
		cpu, err := strconv.Atoi(strings.TrimSuffix(row[col["CPU/member"]], " µs"))
		if err != nil || cpu <= 0 {
			t.Errorf("row %q: CPU/member %q is not a positive count of µs", row, row[col["CPU/member"]])
		}
		if d := ms(row[col["median"]]); d <= 0 {
			t.Errorf("row %q: median %v", row, d)
		}
		medians[row[col["watch"]]] = ms(row[col["median"]])
	}
	// Watching members hear of the join at once; heartbeating ones at
	// their next heartbeat, on average a second later here.
	if medians["on"] >= time.Second || medians["on"] >= medians["off"] {
		t.Errorf("watch on median %v, off %v: want on under the 2 s heartbeat interval and below off", medians["on"], medians["off"])
	}
}
