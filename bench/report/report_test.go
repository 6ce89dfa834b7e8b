package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Lines written to a Report become notes, one per line however the writes
// split them; blank lines are dropped and an unended last line is kept.
func TestReport_WriteSplitsNotesAcrossWrites(t *testing.T) {
	r := &Report{Command: "bench"}
	for _, p := range []string{"first li", "ne\n\nsecond\nthi", "rd"} {
		if _, err := r.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	tab := NewTable(r, "a", "b")
	tab.Row("1", "2")
	tab.Flush()
	var buf bytes.Buffer
	if err := r.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Command string
		Notes   []string
		Tables  []struct {
			Columns []string
			Rows    [][]string
		}
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("report does not parse: %v", err)
	}
	if want := []string{"first line", "second", "third"}; strings.Join(got.Notes, "|") != strings.Join(want, "|") {
		t.Fatalf("notes %q, want %q", got.Notes, want)
	}
	if len(got.Tables) != 1 || strings.Join(got.Tables[0].Columns, ",") != "a,b" ||
		len(got.Tables[0].Rows) != 1 || strings.Join(got.Tables[0].Rows[0], ",") != "1,2" {
		t.Fatalf("tables %+v, want one table a,b with one row 1,2", got.Tables)
	}
}

// A text table right-aligns its cells under the header.
func TestTable_TextAligns(t *testing.T) {
	var buf bytes.Buffer
	tab := NewTable(&buf, "name", "v")
	tab.Row("x", "1000")
	tab.Flush()
	want := "  name     v\n     x  1000\n"
	if buf.String() != want {
		t.Fatalf("table\n%q\nwant\n%q", buf.String(), want)
	}
}

func TestPercentiles(t *testing.T) {
	if a, b, c := Percentiles(nil); a != 0 || b != 0 || c != 0 {
		t.Fatalf("empty: %v %v %v, want zeros", a, b, c)
	}
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	p50, p99, maxD := Percentiles(ds)
	if p50 != 51*time.Millisecond || p99 != 100*time.Millisecond || maxD != 100*time.Millisecond {
		t.Fatalf("p50 %v p99 %v max %v, want 51ms 100ms 100ms", p50, p99, maxD)
	}
}

func TestErrNote(t *testing.T) {
	if got := ErrNote(0, nil); got != "0" {
		t.Fatalf("no errors: %q", got)
	}
	long := errors.New(strings.Repeat("x", 200))
	got := ErrNote(3, long)
	if !strings.HasPrefix(got, "3 (first: xxx") || !strings.HasSuffix(got, "…)") || len([]rune(got)) > 140 {
		t.Fatalf("ErrNote(3, long) = %q: want the count and the first 120 characters", got)
	}
}

// PidCPU reads another process's CPU time: a child (this test binary
// again) spins until its own clock says it has used 300 ms, prints that
// clock and idles; read from outside, its figure is the one it printed,
// within the ticks the kernel counts in and the runtime's own threads. A
// pid that does not exist reads as none.
func TestPidCPU_CountsAnotherProcessesWork(t *testing.T) {
	if os.Getenv("REPORT_TEST_SPIN") != "" {
		for ProcessCPU() < 300*time.Millisecond {
		}
		fmt.Println(ProcessCPU().Nanoseconds())
		time.Sleep(time.Minute) // time passes: the parent reads this process's figure meanwhile, then kills it
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPidCPU_CountsAnotherProcessesWork$")
	cmd.Env = append(os.Environ(), "REPORT_TEST_SPIN=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the child printed no CPU figure: %v", err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil {
		t.Fatalf("the child printed %q", line)
	}
	own := time.Duration(ns)
	got := PidCPU(cmd.Process.Pid)
	if got < own-50*time.Millisecond || got > own+200*time.Millisecond {
		t.Errorf("PidCPU of a child whose own clock said %s: %s", own, got)
	}
	if none := PidCPU(1 << 30); none != 0 {
		t.Errorf("PidCPU of no process: %s, want 0", none)
	}
}
