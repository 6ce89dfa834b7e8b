package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cohortd is the binary the tests' --cluster process runs, built from
// this checkout once for the whole package.
var cohortd string

func TestMain(m *testing.M) {
	// --kfake process runs the test binary as the kfake server.
	if len(os.Args) > 1 && os.Args[1] == kfakeServeCommand {
		if err := kfakeServe(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "kafka-bench-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cohortd = filepath.Join(dir, "cohortd")
	build := exec.Command("go", "build", "-o", cohortd, "./cmd/cohortd")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build cohortd: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testOptions are the command line's defaults shortened to a functional
// run: the figures of so short a run mean nothing, only their shape.
func testOptions(t *testing.T) options {
	t.Helper()
	var o options
	o.register(flag.NewFlagSet("test", flag.ContinueOnError))
	o.sizes = "2"
	o.rounds = 1
	o.heartbeat = 100 * time.Millisecond
	o.concurrency = "1"
	o.duration = 200 * time.Millisecond
	o.warmup = 0
	o.clients = 2
	o.dir = t.TempDir()
	o.timeout = 3 * time.Minute
	o.cohortd = cohortd
	return o
}

// positive reports whether cell is a positive figure followed by unit.
func positive(cell, unit string) bool {
	n, err := strconv.ParseFloat(strings.TrimSuffix(cell, unit), 64)
	return strings.HasSuffix(cell, unit) && err == nil && n > 0
}

// benchReport is cohort-bench's --json shape, as `cohort-bench plot --in`
// reads it.
type benchReport struct {
	Command string    `json:"command"`
	Started time.Time `json:"started"`
	Notes   []string  `json:"notes"`
	Tables  []struct {
		Columns []string   `json:"columns"`
		Rows    [][]string `json:"rows"`
	} `json:"tables"`
}

// runJSON runs o with --json and decodes the report, checking what every
// report has: the command, its start, the targets and the load average
// before and after.
func runJSON(t *testing.T, o options) (r benchReport, notes string) {
	t.Helper()
	o.json = true
	var out bytes.Buffer
	if err := run(context.Background(), o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("report does not parse: %v", err)
	}
	if r.Command != "kafka-bench" || r.Started.IsZero() {
		t.Errorf("command %q, started %v: want kafka-bench and the run's start", r.Command, r.Started)
	}
	notes = strings.Join(r.Notes, "\n")
	if strings.Count(notes, "load average ") != 2 || !strings.Contains(r.Notes[0], "kfake") || !strings.Contains(r.Notes[0], "fsync on") {
		t.Errorf("notes %q: want the targets and the load average before and after", r.Notes)
	}
	return r, notes
}

// checkRebalanceTable checks the rebalance table of a run of one size, 2
// members: both targets' columns side by side, every cell a figure.
func checkRebalanceTable(t *testing.T, r benchReport) {
	t.Helper()
	reb := r.Tables[0]
	wantReb := []string{"members", "cohort median", "cohort max", "kfake median", "kfake max", "median ratio",
		"cohort after last join", "kfake after last join", "after last join ratio"}
	if !slices.Equal(reb.Columns, wantReb) {
		t.Fatalf("rebalance columns %q, want %q", reb.Columns, wantReb)
	}
	if len(reb.Rows) != 1 || len(reb.Rows[0]) != len(wantReb) || reb.Rows[0][0] != "2" {
		t.Fatalf("rebalance rows %q: want one row for 2 members", reb.Rows)
	}
	for i, unit := range map[int]string{1: " ms", 2: " ms", 3: " ms", 4: " ms", 5: "×", 6: " ms", 7: " ms", 8: "×"} {
		if !positive(reb.Rows[0][i], unit) {
			t.Errorf("%s %q: want a positive figure in%s", wantReb[i], reb.Rows[0][i], unit)
		}
	}
}

// The report must be what `cohort-bench plot --in` reads: cohort-bench's
// JSON shape, one table per measurement with the targets' columns side by
// side, and cells whose leading number is the figure.
func TestRun_JSON_IsCohortBenchReportWithBothTargets(t *testing.T) {
	r, notes := runJSON(t, testOptions(t))
	for _, want := range []string{"classic protocol, balancer cooperative-sticky", "rebalance cohort, 2 members: formed", "rebalance kfake, 2 members: formed",
		"generations per round [2]", "Raft term", "OffsetCommit v8", "heartbeat round trips during the rounds: "} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q: want %q", r.Notes, want)
		}
	}
	if len(r.Tables) != 2 {
		t.Fatalf("%d tables, want rebalance and commits", len(r.Tables))
	}
	checkRebalanceTable(t, r)

	com := r.Tables[1]
	wantCom := []string{"C", "cohort ops/s", "cohort p50", "cohort p99", "kfake ops/s", "kfake p50", "kfake p99",
		"ops/s ratio", "p50 ratio", "cohort CPU/op", "kfake CPU/op", "cohort errors", "kfake errors"}
	if !slices.Equal(com.Columns, wantCom) {
		t.Fatalf("commit columns %q, want %q", com.Columns, wantCom)
	}
	if len(com.Rows) != 1 || len(com.Rows[0]) != len(wantCom) {
		t.Fatalf("commit rows %q: want one row of %d cells", com.Rows, len(wantCom))
	}
	row := com.Rows[0]
	if row[0] != "1" || row[11] != "0" || row[12] != "0" {
		t.Errorf("C %q, errors %q and %q: want 1 and no errors", row[0], row[11], row[12])
	}
	for i, unit := range map[int]string{1: "", 2: " ms", 3: " ms", 4: "", 5: " ms", 6: " ms", 7: "×", 8: "×", 9: " µs", 10: " µs"} {
		if !positive(row[i], unit) {
			t.Errorf("%s %q: want a positive figure", wantCom[i], row[i])
		}
	}
}

// --protocol consumer measures KIP-848 groups on both targets (kfake
// serves ConsumerGroupHeartbeat): the same table, the notes naming the
// protocol, the server assignor, the heartbeat interval each coordinator
// gives and the member epochs each round moved; no member may fall back to
// the classic protocol.
func TestRun_ConsumerProtocol_MeasuresKIP848OnBothTargets(t *testing.T) {
	o := testOptions(t)
	o.protocol = "consumer"
	o.consumerHB = 100 * time.Millisecond
	o.skipCommits = true
	r, notes := runJSON(t, o)
	for _, want := range []string{"consumer protocol (KIP-848", "server assignor uniform", "cohort 100ms", "kfake 100ms",
		"rebalance cohort, 2 members: formed", "rebalance kfake, 2 members: formed", "member epochs moved per round [", "Raft term"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q: want %q", r.Notes, want)
		}
	}
	for _, unwanted := range []string{"classic protocol", "not stable", "fell back"} {
		if strings.Contains(notes, unwanted) {
			t.Errorf("notes %q: want no %q", r.Notes, unwanted)
		}
	}
	if len(r.Tables) != 1 {
		t.Fatalf("%d tables, want the rebalance one (--skip-commits)", len(r.Tables))
	}
	checkRebalanceTable(t, r)
}

// Without --json the report is aligned text, one row per concurrency;
// --skip-rebalance leaves the rebalance table out. The nodes may run in
// the bench's own process.
func TestRun_Text_CommitsOnly_OneRowPerConcurrency(t *testing.T) {
	o := testOptions(t)
	o.skipRebalance = true
	o.concurrency = "1,2"
	o.cluster = "inprocess"
	var out bytes.Buffer
	if err := run(context.Background(), o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "in-process") {
		t.Errorf("title %q: want the in-process cluster named", strings.SplitN(out.String(), "\n", 2)[0])
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d lines, want a title, the commits' note, a header, two rows and the load after:\n%s", len(lines), out.String())
	}
	if f := strings.Fields(lines[2]); f[0] != "C" || f[1] != "cohort" {
		t.Errorf("header %q", lines[2])
	}
	for i, c := range []string{"1", "2"} {
		if f := strings.Fields(lines[3+i]); f[0] != c || f[len(f)-1] != "0" || f[len(f)-2] != "0" {
			t.Errorf("row %q: want C %s and no errors", lines[3+i], c)
		}
	}
	if strings.Contains(out.String(), "rebalance") {
		t.Errorf("--skip-rebalance, yet the report mentions a rebalance:\n%s", out.String())
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
		"no duration":     func(o *options) { o.duration = 0 },
		"no clients":      func(o *options) { o.clients = 0 },
		"no rounds":       func(o *options) { o.rounds = 0 },
		"bad sizes":       func(o *options) { o.sizes = "1,,2" },
		"bad balancer":    func(o *options) { o.balancer = "sticky-ish" },
		"bad protocol":    func(o *options) { o.protocol = "next-gen" },
		"classic uniform": func(o *options) { o.balancer = "uniform" },
		"consumer cooperative": func(o *options) {
			o.protocol, o.balancer = "consumer", "cooperative-sticky"
		},
		"no consumer heartbeat":        func(o *options) { o.consumerHB = 0 },
		"consumer heartbeat ≥ session": func(o *options) { o.consumerHB = consumerSessionTimeout },
		"nothing to do":                func(o *options) { o.skipRebalance, o.skipCommits = true, true },
	} {
		o := testOptions(t)
		mod(&o)
		var out bytes.Buffer
		if err := run(context.Background(), o, &out); err == nil {
			t.Errorf("%s: run succeeded, want an error before any cluster starts", name)
		}
	}
}

// --log collects every cohortd's log and --client-log every consumer's,
// each line naming its target and member, so a slow round can be read
// back event by event.
func TestRun_Logs_NodesAndConsumers(t *testing.T) {
	o := testOptions(t)
	o.skipCommits = true
	o.logFile = filepath.Join(t.TempDir(), "nodes.log")
	o.clientLogFile = filepath.Join(t.TempDir(), "clients.log")
	runJSON(t, o)
	nodes, err := os.ReadFile(o.logFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"node1", "node2", "node3", "cohortd started", "entering leader state"} {
		if !bytes.Contains(nodes, []byte(want)) {
			t.Errorf("--log file lacks %q:\n%s", want, nodes)
		}
	}
	clients, err := os.ReadFile(o.clientLogFile)
	if err != nil {
		t.Fatal(err)
	}
	// Two members form each group and a third joins: m0–m2 on each target.
	for _, want := range []string{" cohort m0 ", " cohort m2 ", " kfake m0 ", " kfake m2 ", "joined", "synced", " cohort round 0 start", " kfake round 0 end"} {
		if !bytes.Contains(clients, []byte(want)) {
			t.Errorf("--client-log file lacks %q", want)
		}
	}
	// The steps subcommand reads the file back: one round on each target,
	// each with at least one generation's steps.
	var steps bytes.Buffer
	if err := writeSteps(bytes.NewReader(clients), &steps); err != nil {
		t.Fatalf("steps of the run's client log: %v", err)
	}
	sync := stepRows(steps.String())["1 "+stepNames[2]]
	if !strings.Contains(steps.String(), "cohort: 1 rounds, kfake: 1 rounds") || !strings.HasSuffix(sync[0], " ms") || !strings.HasSuffix(sync[1], " ms") {
		t.Errorf("steps of the run's client log lack a round per target or generation 1's sync step on both:\n%s", &steps)
	}
}

// --kfake process runs kfake in a process of its own (this binary again,
// as kfake-serve): the rebalance is measured on it as on the in-process
// one, and the report says where it ran.
func TestRun_KfakeInAProcessOfItsOwn(t *testing.T) {
	o := testOptions(t)
	o.skipCommits = true
	o.kfake = "process"
	r, notes := runJSON(t, o)
	for _, want := range []string{"in a process of its own", "rebalance kfake, 2 members: formed", "heartbeat round trips during the rounds: "} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q: want %q", r.Notes, want)
		}
	}
	checkRebalanceTable(t, r)
}

// Heartbeats are counted only while a round runs: the note's round trips
// must not mix in those of the seconds after forming, when kgo's parsing
// of every member's first answers holds this process's cores.
func TestDurations_CountsOnlyWhileOn(t *testing.T) {
	var l durations
	l.add(time.Second)
	l.on.Store(true)
	l.add(2 * time.Millisecond)
	l.on.Store(false)
	l.add(time.Second)
	if got := l.take(); !slices.Equal(got, []time.Duration{2 * time.Millisecond}) {
		t.Fatalf("durations kept %v, want only the one added while on: [2ms]", got)
	}
}
