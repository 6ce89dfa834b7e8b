package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/cohortlabs/cohort/bench/report"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// runStateCommand runs `cohort-bench --json state args...` and returns its
// report.
func runStateCommand(t *testing.T, args ...string) (*report.Report, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"--json", "--timeout", "2m", "state", "--dir", t.TempDir()}, args...))
	if err := root.ExecuteContext(context.Background()); err != nil {
		return nil, err
	}
	var r report.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("--json output does not parse: %v\n%s", err, out.String())
	}
	return &r, nil
}

// stateTable is the report's table whose first column is first, as maps
// from column to cell, one per row.
func stateTable(t *testing.T, r *report.Report, first string) []map[string]string {
	t.Helper()
	for _, tb := range r.Tables {
		if len(tb.Columns) == 0 || tb.Columns[0] != first {
			continue
		}
		var rows []map[string]string
		for _, row := range tb.Rows {
			if len(row) != len(tb.Columns) {
				t.Fatalf("table %q: row %q has %d cells for %d columns", first, row, len(row), len(tb.Columns))
			}
			m := map[string]string{}
			for i, c := range tb.Columns {
				m[c] = row[i]
			}
			rows = append(rows, m)
		}
		return rows
	}
	t.Fatalf("no table starts with column %q", first)
	return nil
}

// cellNumber is a cell's figure as plot reads it; it must be within
// [lo, hi].
func cellNumber(t *testing.T, row map[string]string, col string, lo, hi float64) float64 {
	t.Helper()
	v, err := leadingNumber(row[col])
	if err != nil || v < lo || v > hi {
		t.Errorf("row %v: %q is %q, want a number in [%g, %g]", row, col, row[col], lo, hi)
	}
	return v
}

// TestState_TinySizesReportEveryCurve runs `state` at tiny sizes with
// --json: one row per size (and shape), each count in its first column,
// every figure positive and within what an offset, member or group can
// cost, every committed offset found again after the restore, and the
// load average before and after.
func TestState_TinySizesReportEveryCurve(t *testing.T) {
	r, err := runStateCommand(t, "--offsets", "2500,6000", "--partitions-per-group", "1000", "--commit-batch", "300",
		"--members", "60,150", "--group-size", "20", "--groups", "300,800")
	if err != nil {
		t.Fatal(err)
	}

	offsets := stateTable(t, r, "offsets")
	if len(offsets) != 2 {
		t.Fatalf("offsets table has %d rows, want 2 (one per size)", len(offsets))
	}
	for i, n := range []int{2500, 6000} {
		row := offsets[i]
		if row["offsets"] != fmt.Sprint(n) || row["groups"] != fmt.Sprint((n+999)/1000) {
			t.Errorf("row %d: %v, want %d offsets in %d groups", i, row, n, (n+999)/1000)
		}
		if row["restored offsets"] != fmt.Sprint(n) {
			t.Errorf("row %d: restored %s offsets, want %d", i, row["restored offsets"], n)
		}
		// An offset costs a map entry and its topic string: tens to
		// hundreds of bytes, never a kilobyte.
		cellNumber(t, row, "heap bytes/offset", 30, 1000)
		cellNumber(t, row, "restored heap bytes/offset", 30, 1000)
		cellNumber(t, row, "estimate bytes/offset", 100, 1000)
		// A snapshot record: group and topic names, four numbers.
		perOffset := cellNumber(t, row, "snapshot bytes/offset", 20, 200)
		if size := cellNumber(t, row, "snapshot bytes", 1, 1e9); math.Abs(size/float64(n)-perOffset) > 0.051 {
			t.Errorf("row %d: snapshot of %v bytes is not %v bytes per offset", i, size, perOffset)
		}
		for _, col := range []string{"apply ns/offset", "snapshot ms", "snapshot ns/offset", "restore ms", "restore ns/offset", "peak RSS MiB"} {
			cellNumber(t, row, col, 1e-9, 1e9)
		}
	}

	members := stateTable(t, r, "members")
	if len(members) != 2 || members[0]["groups"] != "3" || members[1]["groups"] != "8" {
		t.Fatalf("members table %v, want 60 members in 3 groups and 150 in 8", members)
	}
	for _, row := range members {
		// IDs, metadata of two protocols, an assignment: hundreds of bytes.
		cellNumber(t, row, "heap bytes/member", 100, 20000)
		cellNumber(t, row, "estimate bytes/member", 100, 20000)
		cellNumber(t, row, "snapshot bytes/member", 50, 5000)
		cellNumber(t, row, "apply µs/member", 1e-9, 1e6)
	}

	groups := stateTable(t, r, "groups")
	var got []string
	for _, row := range groups {
		got = append(got, row["groups"]+" "+row["shape"])
		cellNumber(t, row, "heap bytes/group", 50, 20000)
		cellNumber(t, row, "snapshot bytes/group", 10, 5000)
	}
	if want := []string{"300 one-member", "300 one-offset", "800 one-member", "800 one-offset"}; !slices.Equal(got, want) {
		t.Fatalf("groups rows %q, want %q", got, want)
	}

	got = nil
	for _, row := range stateTable(t, r, "count") {
		got = append(got, row["count"]+" "+row["item"])
		cellNumber(t, row, "heap bytes/item", 30, 20000)
	}
	if want := []string{"2500 offset", "6000 offset", "60 member", "150 member",
		"300 one-member group", "300 one-offset group", "800 one-member group", "800 one-offset group"}; !slices.Equal(got, want) {
		t.Fatalf("bytes-per-item rows %q, want %q", got, want)
	}

	if len(r.Notes) < 2 || !strings.Contains(r.Notes[0], "load average") || !strings.Contains(r.Notes[len(r.Notes)-1], "load average") {
		t.Errorf("notes %q: want the load average first and last", r.Notes)
	}
	if !slices.ContainsFunc(r.Notes, func(n string) bool {
		return strings.Contains(n, "budgets used") && strings.Contains(n, "state-bytes 1099511627776")
	}) {
		t.Errorf("notes %q do not name the budgets used", r.Notes)
	}
}

// TestState_OnlyTheCurvesAsked: an empty size list skips its curve.
func TestState_OnlyTheCurvesAsked(t *testing.T) {
	r, err := runStateCommand(t, "--offsets", "", "--members", "", "--groups", "40", "--group-shape", "one-offset")
	if err != nil {
		t.Fatal(err)
	}
	var first []string
	for _, tb := range r.Tables {
		first = append(first, tb.Columns[0])
	}
	if !slices.Equal(first, []string{"groups", "count"}) {
		t.Fatalf("tables %q, want groups and count only", first)
	}
	if rows := stateTable(t, r, "groups"); len(rows) != 1 || rows[0]["shape"] != "one-offset" {
		t.Fatalf("groups rows %v, want one of shape one-offset", rows)
	}
}

// TestState_RefusesRunsItCannotMeasure: bad sizes fail before anything
// is built, naming the flag.
func TestState_RefusesRunsItCannotMeasure(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--offsets", "", "--members", "", "--groups", ""}, "nothing to measure"},
		{[]string{"--offsets", "10,-5"}, "--offsets"},
		{[]string{"--commit-batch", "5000"}, "--commit-batch"},
		{[]string{"--group-size", "0"}, "--group-size"},
		{[]string{"--group-shape", "two-members"}, "--group-shape"},
	} {
		if _, err := runStateCommand(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("state %q: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

// TestState_RestoreCheckCountsOnlyOffsetsHeldWithTheirValue: the check
// behind "restored offsets" finds every offset in a restored FSM, and
// misses an offset whose value changed or that was never committed.
func TestState_RestoreCheckCountsOnlyOffsetsHeldWithTheirValue(t *testing.T) {
	const n, perGroup = 2500, 1000
	o := stateOptions{offsets: []int{n}, groupSize: 1, partitionsPerGroup: perGroup, commitBatch: 300}
	store, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(t.TempDir(), "snaps"), 1, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	built, err := buildAndPersistOffsets(context.Background(), store, o.budgets(), o, n)
	if err != nil {
		t.Fatal(err)
	}
	if built.groups != 3 || built.size <= 0 || built.heap <= 0 {
		t.Fatalf("built %+v, want 3 groups, a snapshot and a heap", built)
	}
	f, err := restoreSnapshot(store, built.id)
	if err != nil {
		t.Fatal(err)
	}
	if held := countOffsets(f, n, perGroup); held != n {
		t.Fatalf("the restored FSM holds %d of %d offsets", held, n)
	}
	// One offset moves: it no longer counts.
	r := &replica{f: f, index: f.AppliedIndex()}
	if err := r.entry(&fsmv1.Command{Kind: &fsmv1.Command_CommitOffsets{CommitOffsets: &fsmv1.CommitOffsets{
		GroupId: stateGroup(1), Generation: -1,
		Offsets: []*fsmv1.OffsetCommit{{Topic: stateTopic(1), Partition: 7, Offset: committedOffset(1, 7) + 1}},
	}}}); err != nil {
		t.Fatal(err)
	}
	if held := countOffsets(f, n, perGroup); held != n-1 {
		t.Fatalf("after moving one offset the check finds %d, want %d", held, n-1)
	}
	// Offsets never committed are not found.
	small, _, err := emptyReplica(o.budgets())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := buildOffsets(context.Background(), small, 2000, perGroup, 300); err != nil {
		t.Fatal(err)
	}
	if held := countOffsets(small.f, n, perGroup); held != 2000 {
		t.Fatalf("an FSM with 2000 of the offsets: the check finds %d", held)
	}
}
