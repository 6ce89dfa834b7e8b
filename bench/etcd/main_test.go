package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testOptions are the command line's defaults shortened to a functional
// run: the figures of so short a phase mean nothing, only their shape.
func testOptions(t *testing.T) options {
	t.Helper()
	var o options
	o.register(flag.NewFlagSet("test", flag.ContinueOnError))
	o.concurrency = "1"
	o.duration = 200 * time.Millisecond
	o.warmup = 0
	o.clients = 2
	o.dir = t.TempDir()
	o.timeout = 2 * time.Minute
	return o
}

// The report must be what `cohort-bench plot --in` reads: cohort-bench's
// JSON shape, the column names, and cells whose leading number is
// the figure.
func TestRun_JSON_IsCohortBenchReportWithEtcdColumns(t *testing.T) {
	o := testOptions(t)
	o.json = true
	var out bytes.Buffer
	if err := run(context.Background(), o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	var r struct {
		Command string    `json:"command"`
		Started time.Time `json:"started"`
		Notes   []string  `json:"notes"`
		Tables  []struct {
			Columns []string   `json:"columns"`
			Rows    [][]string `json:"rows"`
		} `json:"tables"`
	}
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("report does not parse: %v", err)
	}
	if r.Command != "etcd-bench" || r.Started.IsZero() {
		t.Errorf("command %q, started %v: want etcd-bench and the run's start", r.Command, r.Started)
	}
	if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "load average ") || !strings.Contains(r.Notes[0], "all three endpoints") {
		t.Errorf("notes %q: want one line naming the endpoints and the load average", r.Notes)
	}
	if len(r.Tables) != 1 {
		t.Fatalf("%d tables, want 1", len(r.Tables))
	}
	tb := r.Tables[0]
	want := []string{"C", "etcd ops/s", "etcd p50", "etcd p99", "etcd max", "etcd CPU/op", "etcd errors"}
	if !slices.Equal(tb.Columns, want) {
		t.Fatalf("columns %q, want %q", tb.Columns, want)
	}
	if len(tb.Rows) != 1 || len(tb.Rows[0]) != len(want) {
		t.Fatalf("rows %q: want one row of %d cells", tb.Rows, len(want))
	}
	row := tb.Rows[0]
	if row[0] != "1" || row[6] != "0" {
		t.Errorf("C %q, errors %q: want 1 and 0", row[0], row[6])
	}
	if ops, err := strconv.Atoi(row[1]); err != nil || ops <= 0 {
		t.Errorf("ops/s %q: want a positive count", row[1])
	}
	for i, unit := range map[int]string{2: " ms", 3: " ms", 4: " ms", 5: " µs"} {
		n, err := strconv.ParseFloat(strings.TrimSuffix(row[i], unit), 64)
		if !strings.HasSuffix(row[i], unit) || err != nil || n <= 0 {
			t.Errorf("%s %q: want a positive figure in%s", want[i], row[i], unit)
		}
	}
}

// Without --json the report is an aligned table, one row per concurrency,
// and --leader-only says so in its title.
func TestRun_Text_LeaderOnly_OneRowPerConcurrency(t *testing.T) {
	o := testOptions(t)
	o.concurrency = "1,2"
	o.leaderOnly = true
	var out bytes.Buffer
	if err := run(context.Background(), o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want a title, a header and two rows:\n%s", len(lines), out.String())
	}
	if !strings.Contains(lines[0], "the leader's endpoint only") {
		t.Errorf("title %q does not say the clients use the leader only", lines[0])
	}
	if f := strings.Fields(lines[1]); f[0] != "C" || f[1] != "etcd" {
		t.Errorf("header %q", lines[1])
	}
	for i, c := range []string{"1", "2"} {
		if f := strings.Fields(lines[2+i]); f[0] != c || f[len(f)-1] != "0" {
			t.Errorf("row %q: want C %s and no errors", lines[2+i], c)
		}
	}
}

func TestParseInts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"1,16,256", []int{1, 16, 256}},
		{" 4 , 8", []int{4, 8}},
		{"", nil},
		{"0", nil},
		{"1,x", nil},
		{"-3", nil},
	} {
		got, err := parseInts("concurrency", tc.in)
		if tc.want == nil {
			if err == nil {
				t.Errorf("parseInts(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseInts(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestRun_RefusesBadOptions(t *testing.T) {
	for name, mod := range map[string]func(*options){
		"no duration": func(o *options) { o.duration = 0 },
		"no clients":  func(o *options) { o.clients = 0 },
		"bad list":    func(o *options) { o.concurrency = "1,,2" },
	} {
		o := testOptions(t)
		mod(&o)
		var out bytes.Buffer
		if err := run(context.Background(), o, &out); err == nil {
			t.Errorf("%s: run succeeded, want an error before any cluster starts", name)
		}
	}
}
