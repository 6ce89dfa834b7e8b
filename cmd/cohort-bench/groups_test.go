package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// benchDoc is the report --json prints, as a test reads it back.
type benchDoc struct {
	Notes  []string     `json:"notes"`
	Tables []benchTable `json:"tables"`
}

type benchTable struct {
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// cell is row's cell in the first column named column.
func (tb benchTable) cell(t *testing.T, row []string, column string) string {
	t.Helper()
	i := slices.Index(tb.Columns, column)
	if i < 0 || i >= len(row) {
		t.Fatalf("no column %q in %q (row %q)", column, tb.Columns, row)
	}
	return row[i]
}

// positive checks that each of columns reads as a positive number in row.
func (tb benchTable) positive(t *testing.T, row []string, columns ...string) {
	t.Helper()
	for _, c := range columns {
		if v, err := leadingNumber(tb.cell(t, row, c)); err != nil || v <= 0 {
			t.Errorf("row %q: %s is %q, want a positive number", row, c, tb.cell(t, row, c))
		}
	}
}

// runBenchJSON runs cohort-bench --json with args on a cluster of its own
// in a test directory and returns the report.
func runBenchJSON(t *testing.T, args ...string) benchDoc {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"--json", "--dir", t.TempDir(), "--timeout", "3m"}, args...))
	err := root.ExecuteContext(context.Background())
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("cohort-bench %s: %v (%s)", strings.Join(args, " "), err, errOut.String())
	}
	var doc benchDoc
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("--json output does not parse: %v", err)
	}
	return doc
}

// noteWith is the first note that starts with prefix.
func (d benchDoc) noteWith(t *testing.T, prefix string) string {
	t.Helper()
	for _, n := range d.Notes {
		if strings.HasPrefix(n, prefix) {
			return n
		}
	}
	t.Fatalf("no note starts with %q: %q", prefix, d.Notes)
	return ""
}

// TestCommitSpread_PrefillCoversEveryCommit: every commit of a spread goes
// to a partition its group's prefill committed, and the prefill commits
// lcm(groups, partitions) offsets, each once.
func TestCommitSpread_PrefillCoversEveryCommit(t *testing.T) {
	for _, tc := range []struct {
		groups     int
		partitions int32
		offsets    int
	}{
		{1, 8, 8},
		{3, 8, 24},
		{10, 8, 40},
		{16, 8, 16},
		{10_000, 256, 160_000},
	} {
		s := newCommitSpread("g", tc.groups, tc.partitions)
		if got := s.offsets(); got != tc.offsets {
			t.Errorf("%d groups × %d partitions: offsets() %d, want %d", tc.groups, tc.partitions, got, tc.offsets)
		}
		held := map[string]map[int32]bool{}
		n := 0
		for i, name := range s.names {
			held[name] = map[int32]bool{}
			for _, p := range s.partitionsOf(i) {
				if held[name][p] || p < 0 || p >= tc.partitions {
					t.Fatalf("%d groups × %d partitions: group %d's prefill has partition %d twice or out of range", tc.groups, tc.partitions, i, p)
				}
				held[name][p] = true
				n++
			}
		}
		if n != tc.offsets {
			t.Errorf("%d groups × %d partitions: the prefill commits %d offsets, want %d", tc.groups, tc.partitions, n, tc.offsets)
		}
		for seq := int64(1); seq <= 2*int64(tc.offsets); seq++ {
			if g, p := s.at(seq); !held[g][p] {
				t.Fatalf("%d groups × %d partitions: commit %d goes to %s/%d, which the prefill did not commit", tc.groups, tc.partitions, seq, g, p)
			}
		}
	}
}

// TestCommitsGroups_SpreadOverEveryGroupAndOnlyOverwrite runs commits
// --mode conn --groups at the smallest scale: one row per (groups, C) in
// both tables, every figure positive and no errors, and the leader's state
// holding exactly the prefilled groups and offsets before and after the
// measured phases (so the raw and client phases committed to the same
// groups and partitions as the prefill, creating nothing).
func TestCommitsGroups_SpreadOverEveryGroupAndOnlyOverwrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	doc := runBenchJSON(t, "commits", "--mode", "conn", "--groups", "1,10", "--concurrency", "1,4", "--duration", "200ms", "--partitions", "8")
	if len(doc.Tables) != 2 {
		t.Fatalf("%d tables, want the commits and the stage table", len(doc.Tables))
	}
	want := [][]string{{"1", "1"}, {"1", "4"}, {"10", "1"}, {"10", "4"}}
	for _, tb := range doc.Tables {
		if !slices.Equal(tb.Columns[:2], []string{"groups", "C"}) {
			t.Fatalf("columns %q, want groups and C first", tb.Columns)
		}
		if len(tb.Rows) != len(want) {
			t.Fatalf("%d rows, want %d: %q", len(tb.Rows), len(want), tb.Rows)
		}
		for i, row := range tb.Rows {
			if !slices.Equal(row[:2], want[i]) {
				t.Errorf("row %d starts %q, want %q", i, row[:2], want[i])
			}
		}
	}
	commits := doc.Tables[0]
	for _, row := range commits.Rows {
		commits.positive(t, row, "raw ops/s", "raw p99", "client ops/s", "p50", "p99")
		if e := commits.cell(t, row, "errors"); e != "0" {
			t.Errorf("row %q: errors %q", row, e)
		}
	}
	// 1 group holds all 8 partitions. Of 10, group i sees the partitions
	// of i's parity (gcd(10, 8) = 2), 4 each, and group 0 keeps its 8:
	// 8 + 9×4 = 44.
	for prefix, state := range map[string]string{
		"groups 1: prefilled":  "the leader's state: 1 groups, 8 offsets",
		"groups 10: prefilled": "the leader's state: 10 groups, 44 offsets",
		"commits done":         "the leader's state: 10 groups, 44 offsets",
	} {
		if n := doc.noteWith(t, prefix); !strings.Contains(n, state) {
			t.Errorf("note %q lacks %q", n, state)
		}
	}
	loads := 0
	for _, n := range doc.Notes {
		loads += strings.Count(n, "load average")
	}
	if loads != 2 {
		t.Errorf("%d load averages in the notes, want one before and one after: %q", loads, doc.Notes)
	}
}

// TestCommitsGroups_RefusesWhatItCannotMeasure: --groups is mode conn's,
// its sizes grow, and the refusals come before any cluster starts.
func TestCommitsGroups_RefusesWhatItCannotMeasure(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "member", "--groups", "1,10"}, "needs --mode conn"},
		{[]string{"--mode", "member", "--groups", "2"}, "needs --mode conn"},
		{[]string{"--mode", "conn", "--groups", "10,1"}, "the sizes must increase"},
		{[]string{"--mode", "conn", "--groups", "0"}, "not a positive integer"},
		{[]string{"--mode", "conn", "--partitions", "0"}, "--partitions 0"},
	} {
		root := newRootCommand()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs(append([]string{"--endpoints", "127.0.0.1:1", "--timeout", "10s", "commits"}, tc.args...))
		if err := root.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("commits %q: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// TestCommits_LogStoreFlag: --log-store wal is refused while the kind is
// withdrawn (raftnode/logstore.go), with raftnode's reason, before any
// cluster starts.
func TestCommits_LogStoreFlag(t *testing.T) {
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"--dir", t.TempDir(), "--log-store", "wal", "commits", "--duration", "100ms"})
	err := root.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), "withdrawn") {
		t.Fatalf("--log-store wal: %v, want the withdrawal", err)
	}
	root = newRootCommand()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"--log-store", "rocksdb", "commits"})
	if err := root.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), `log store "rocksdb"`) {
		t.Fatalf("--log-store rocksdb: %v", err)
	}
}

// TestTraceAndProfileFlags: --trace and --cpuprofile each leave a file of
// their kind covering the run.
func TestTraceAndProfileFlags(t *testing.T) {
	dir := t.TempDir()
	tracePath, profPath := filepath.Join(dir, "run.trace"), filepath.Join(dir, "cpu.pprof")
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"--dir", filepath.Join(dir, "cluster"), "--trace", tracePath, "--cpuprofile", profPath,
		"commits", "--concurrency", "1", "--duration", "200ms"})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("commits with --trace and --cpuprofile: %v\n%s", err, errOut.String())
	}
	tr, err := os.ReadFile(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr) < 1024 || !bytes.HasPrefix(tr, []byte("go 1.")) || !bytes.Contains(tr[:16], []byte(" trace")) {
		t.Fatalf("--trace wrote %d bytes starting %q, want an execution trace", len(tr), tr[:min(len(tr), 16)])
	}
	prof, err := os.ReadFile(profPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(prof) < 2 || prof[0] != 0x1f || prof[1] != 0x8b {
		t.Fatalf("--cpuprofile wrote %d bytes, want a gzipped profile", len(prof))
	}
}
