package main

import (
	"context"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestHeartbeats_GrowsTheGroupAndMeasuresEverySize runs heartbeats with two
// sizes at the smallest scale: one row per (members, C), every rate and
// latency positive and no errors, the group grown to the second size in
// new generations (in waves of --form-wave), and a note per size.
func TestHeartbeats_GrowsTheGroupAndMeasuresEverySize(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	doc := runBenchJSON(t, "heartbeats", "--members", "3,6", "--form-wave", "2", "--concurrency", "1,4", "--conns", "2", "--duration", "200ms")
	if len(doc.Tables) != 1 {
		t.Fatalf("%d tables, want 1", len(doc.Tables))
	}
	tb := doc.Tables[0]
	if !slices.Equal(tb.Columns[:2], []string{"members", "C"}) {
		t.Fatalf("columns %q, want members and C first", tb.Columns)
	}
	want := [][]string{{"3", "1"}, {"3", "4"}, {"6", "1"}, {"6", "4"}}
	if len(tb.Rows) != len(want) {
		t.Fatalf("%d rows, want %d: %q", len(tb.Rows), len(want), tb.Rows)
	}
	gens := map[string]int{}
	for i, row := range tb.Rows {
		if !slices.Equal(row[:2], want[i]) {
			t.Errorf("row %d starts %q, want %q", i, row[:2], want[i])
		}
		tb.positive(t, row, "heartbeats/s", "p50", "p99")
		if e := tb.cell(t, row, "errors"); e != "0" {
			t.Errorf("row %q: errors %q", row, e)
		}
		gen, err := strconv.Atoi(tb.cell(t, row, "generation"))
		if err != nil {
			t.Fatalf("row %q: generation: %v", row, err)
		}
		if g, ok := gens[row[0]]; ok && g != gen {
			t.Errorf("members %s measured at generations %d and %d", row[0], g, gen)
		}
		gens[row[0]] = gen
	}
	// 3 members in waves of 2 and 1, then 3 more: at least two generations each.
	if gens["3"] < 2 || gens["6"] < gens["3"]+2 {
		t.Errorf("generations %v: want at least 2 at 3 members and 2 more at 6", gens)
	}
	for _, prefix := range []string{"members 3: stable at generation", "members 6: stable at generation", "heartbeats done"} {
		doc.noteWith(t, prefix)
	}
	loads := 0
	for _, n := range doc.Notes {
		loads += strings.Count(n, "load average")
	}
	if loads != 2 {
		t.Errorf("%d load averages in the notes, want one before and one after: %q", loads, doc.Notes)
	}
}

// TestHeartbeats_RefusesSizesThatDoNotGrow: the sizes grow and waves hold
// a member, refused before any cluster starts.
func TestHeartbeats_RefusesSizesThatDoNotGrow(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--members", "10,10"}, "the sizes must increase"},
		{[]string{"--members", "100,10"}, "the sizes must increase"},
		{[]string{"--members", "5", "--form-wave", "0"}, "--form-wave 0"},
		{[]string{"--members", "5", "--conns", "0"}, "--conns 0"},
	} {
		root := newRootCommand()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs(append([]string{"--endpoints", "127.0.0.1:1", "--timeout", "10s", "heartbeats"}, tc.args...))
		if err := root.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("heartbeats %q: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
