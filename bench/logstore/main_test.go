package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testOptions are the command line's defaults shortened to a functional
// run, with snapshots so frequent that several truncations happen in it:
// the figures of so short a run mean nothing, only their shape.
func testOptions(t *testing.T) options {
	t.Helper()
	var o options
	o.register(flag.NewFlagSet("test", flag.ContinueOnError))
	o.duration = 2 * time.Second
	o.interval = 500 * time.Millisecond
	o.concurrency = 4
	o.snapshotInterval = 100 * time.Millisecond
	o.snapshotThreshold = 100
	o.trailingLogs = 50
	o.dir = t.TempDir()
	return o
}

type jsonDoc struct {
	Command string    `json:"command"`
	Started time.Time `json:"started"`
	Notes   []string  `json:"notes"`
	Tables  []struct {
		Columns []string   `json:"columns"`
		Rows    [][]string `json:"rows"`
	} `json:"tables"`
}

// --both must give what `cohort-bench plot --in … --x "elapsed s" --y
// "ops/s" --series store` reads: cohort-bench's JSON shape, one table of
// samples per store with the store in every row, and a note per store
// with its settings and the load average. The rows must show the
// snapshots and the truncations the run exists to provoke.
func TestRun_JSON_Both_IsCohortBenchReportWithARowPerInterval(t *testing.T) {
	o := testOptions(t)
	o.json = true
	o.both = true
	var out bytes.Buffer
	if err := run(context.Background(), o, &out, io.Discard); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	var r jsonDoc
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("report does not parse: %v", err)
	}
	if r.Command != "logstore-bench" || r.Started.IsZero() {
		t.Errorf("command %q, started %v: want logstore-bench and the run's start", r.Command, r.Started)
	}
	stores := []string{storeBolt, storeWAL}
	if len(r.Notes) != len(stores) {
		t.Fatalf("notes %q: want one per store", r.Notes)
	}
	for i, s := range stores {
		for _, want := range []string{"store " + s + ":", "snapshot interval 100ms", "threshold 100 entries", "trailing logs 50", "load average "} {
			if !strings.Contains(r.Notes[i], want) {
				t.Errorf("note %q lacks %q", r.Notes[i], want)
			}
		}
	}
	if len(r.Tables) != len(stores)+1 {
		t.Fatalf("%d tables, want one per store and the summary", len(r.Tables))
	}
	col := func(name string) int { return slices.Index(columns, name) }
	for i, s := range stores {
		tb := r.Tables[i]
		if !slices.Equal(tb.Columns, columns) {
			t.Fatalf("%s: columns %q, want %q", s, tb.Columns, columns)
		}
		if len(tb.Rows) != 4 {
			t.Fatalf("%s: %d rows, want one per 500 ms of 2 s", s, len(tb.Rows))
		}
		var ops int
		prev := 0.0
		for _, row := range tb.Rows {
			if len(row) != len(columns) || row[col("store")] != s || row[col("errors")] != "0" {
				t.Fatalf("%s: row %q: want %d cells, the store's name and no errors", s, row, len(columns))
			}
			el, err := strconv.ParseFloat(row[col("elapsed s")], 64)
			if err != nil || el <= prev {
				t.Errorf("%s: elapsed %q after %.1f: want a growing figure", s, row[col("elapsed s")], prev)
			}
			prev = el
			n, err := strconv.Atoi(row[col("ops/s")])
			if err != nil {
				t.Errorf("%s: ops/s %q", s, row[col("ops/s")])
			}
			ops += n
			for _, c := range []string{"p50", "p99", "max"} {
				if !strings.HasSuffix(row[col(c)], " ms") {
					t.Errorf("%s: %s %q: want a figure in ms", s, c, row[col(c)])
				}
			}
		}
		if ops == 0 {
			t.Errorf("%s: no commits in any interval", s)
		}
		last := tb.Rows[len(tb.Rows)-1]
		snaps, _ := strconv.Atoi(last[col("snapshots")])
		first, _ := strconv.ParseUint(last[col("first index")], 10, 64)
		lastIdx, _ := strconv.ParseUint(last[col("last index")], 10, 64)
		bytes, _ := strconv.ParseInt(last[col("log bytes")], 10, 64)
		if snaps < 1 || first <= 1 || lastIdx <= first || bytes <= 0 {
			t.Errorf("%s: last row %q: want snapshots taken, the log truncated (first index > 1) and its files measured", s, last)
		}
	}
	sum := r.Tables[len(stores)]
	if len(sum.Rows) != len(stores) || sum.Rows[0][0] != storeBolt || sum.Rows[1][0] != storeWAL {
		t.Errorf("summary rows %q: want bolt then wal", sum.Rows)
	}
}

// Without --json the report is text: the note, the header and the rows as
// they come, then the summary.
func TestRun_Text_OneStore(t *testing.T) {
	o := testOptions(t)
	o.stores = storeBoltDefaults
	o.duration = time.Second
	var out bytes.Buffer
	if err := run(context.Background(), o, &out, io.Discard); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1+1+2+2 {
		t.Fatalf("%d lines, want the note, a header, two rows and the summary:\n%s", len(lines), out.String())
	}
	if !strings.HasPrefix(lines[0], "store bolt-defaults: ") || !strings.Contains(lines[0], "default options") {
		t.Errorf("note %q", lines[0])
	}
	if f := strings.Fields(lines[1]); f[0] != "store" || f[1] != "elapsed" {
		t.Errorf("header %q", lines[1])
	}
	for _, l := range lines[2:4] {
		if f := strings.Fields(l); f[0] != storeBoltDefaults || f[len(f)-1] != "0" {
			t.Errorf("row %q: want the store and no errors", l)
		}
	}
	if f := strings.Fields(lines[5]); f[0] != storeBoltDefaults {
		t.Errorf("summary row %q", lines[5])
	}
}

func TestOptions_Validate(t *testing.T) {
	for name, tc := range map[string]struct {
		mod  func(*options)
		want []string // nil: an error
	}{
		"default":      {func(*options) {}, []string{storeBolt}},
		"both":         {func(o *options) { o.both = true }, []string{storeBolt, storeWAL}},
		"list":         {func(o *options) { o.stores = "wal, bolt-defaults" }, []string{storeWAL, storeBoltDefaults}},
		"unknown":      {func(o *options) { o.stores = "badger" }, nil},
		"empty item":   {func(o *options) { o.stores = "bolt," }, nil},
		"no callers":   {func(o *options) { o.concurrency = 0 }, nil},
		"no duration":  {func(o *options) { o.duration = 0 }, nil},
		"long sample":  {func(o *options) { o.interval = time.Hour }, nil},
		"no threshold": {func(o *options) { o.snapshotThreshold = 0 }, nil},
		"no groups":    {func(o *options) { o.groups = 0 }, nil},
	} {
		var o options
		o.register(flag.NewFlagSet("test", flag.ContinueOnError))
		tc.mod(&o)
		got, err := o.validate()
		if tc.want == nil {
			if err == nil {
				t.Errorf("%s: validate = %v, want an error", name, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: validate = %v, %v; want %v", name, got, err, tc.want)
		}
	}
}

// The summary compares the first third of the run with the last, by rate
// over their whole length rather than by averaging rows.
func TestSummarise_ThirdsByRate(t *testing.T) {
	s := time.Second
	samples := []sample{
		{ops: 100, length: s}, {ops: 300, length: 3 * s}, // first third: 400 in 4 s
		{ops: 50, length: s}, {ops: 50, length: s},
		{ops: 60, length: s}, {ops: 40, length: s}, // last third: 100 in 2 s
	}
	got := summarise("x", samples, 3)
	want := summary{store: "x", ops: 600, mean: 600.0 / 8, first: 100, last: 50, thirds: true, snapshots: 3}
	if got != want {
		t.Errorf("summarise = %+v, want %+v", got, want)
	}
}
