package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"

	"github.com/cohortlabs/cohort/bench/report"
)

// TestJSONReportThenPlot: a table written through --json's report reads
// back as curves (one per series value, sorted by x, cells read as their
// leading number, rows filtered by --where), and plot draws them as a PNG.
func TestJSONReportThenPlot(t *testing.T) {
	r := &report.Report{Command: "cohort-bench rebalance"}
	fmt.Fprintf(r, "rebalance latency, load average 0.10 0.20 0.30\n")
	tb := report.NewTable(r, "members", "watch", "median", "max")
	tb.Row("100", "on", "40.00 ms", "45.00 ms")
	tb.Row("10", "on", "20.50 ms", "21.00 ms")
	tb.Row("10", "off", "1500.00 ms", "1600.00 ms")
	tb.Row("100", "off", "-", "-")
	tb.Flush()
	dir, in := writeReport(t, r)
	o := plotOptions{inputs: []string{in}, x: "members", y: []string{"median"}, series: "watch", out: filepath.Join(dir, "curve.png"), logX: true}
	names, curves, err := curvePoints(o)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]plotter.XYs{"watch on": {{X: 10, Y: 20.5}, {X: 100, Y: 40}}, "watch off": {{X: 10, Y: 1500}}}
	if fmt.Sprint(names) != "[watch on watch off]" || fmt.Sprint(curves) != fmt.Sprint(want) {
		t.Fatalf("curves %v %v, want [watch on watch off] %v", names, curves, want)
	}
	o.filter = []string{"watch=off"}
	if names, _, err := curvePoints(o); err != nil || fmt.Sprint(names) != "[watch off]" {
		t.Fatalf("with --where watch=off: %v %v, want [watch off]", names, err)
	}
	o.filter = nil
	if err := drawPlot(o); err != nil {
		t.Fatal(err)
	}
	png, err := os.ReadFile(o.out)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("plot wrote %d bytes (%v), want a PNG", len(png), err)
	}
	if _, _, err := curvePoints(plotOptions{inputs: []string{in}, x: "members", y: []string{"p99"}}); err == nil {
		t.Fatal("a column no table has was accepted")
	}
	// Two y columns: one curve per column and series value.
	names, _, err = curvePoints(plotOptions{inputs: []string{in}, x: "members", y: []string{"median", "max"}, filter: []string{"watch=on"}, series: "watch"})
	if err != nil || fmt.Sprint(names) != "[median, watch on max, watch on]" {
		t.Fatalf("two y columns: %v %v", names, err)
	}
	// Labelled inputs: each input's curves carry its label.
	names, curves, err = curvePoints(plotOptions{inputs: []string{in, in}, labels: []string{"bolt", "wal"}, x: "members", y: []string{"median"}, series: "watch", filter: []string{"watch=on"}})
	if err != nil || fmt.Sprint(names) != "[bolt, watch on wal, watch on]" || len(curves["wal, watch on"]) != 2 {
		t.Fatalf("labelled inputs: %v %v %v", names, curves, err)
	}
	if _, _, err := curvePoints(plotOptions{inputs: []string{in, in}, labels: []string{"bolt"}, x: "members", y: []string{"median"}}); err == nil {
		t.Fatal("one label for two inputs was accepted")
	}
	if len(r.Notes) != 1 {
		t.Fatalf("notes %q, want the one title line", r.Notes)
	}
}

// The legend goes to the corner asked for; another word is refused, naming
// the flag.
func TestPlot_LegendCorner(t *testing.T) {
	r := &report.Report{Command: "cohort-bench state"}
	tb := report.NewTable(r, "count", "bytes")
	tb.Row("10", "100")
	tb.Row("100", "90")
	dir, in := writeReport(t, r)
	o := plotOptions{inputs: []string{in}, x: "count", y: []string{"bytes"}, out: filepath.Join(dir, "p.png")}
	for _, corner := range []string{"top-left", "top-right", "bottom-left", "bottom-right"} {
		o.legend = corner
		if err := drawPlot(o); err != nil {
			t.Fatalf("--legend %s: %v", corner, err)
		}
	}
	o.legend = "middle"
	if err := drawPlot(o); err == nil || !strings.Contains(err.Error(), "--legend") {
		t.Fatalf("--legend middle: %v, want an error naming --legend", err)
	}
}

// writeReport writes r as --json would into a new directory and returns
// the directory and the file.
func writeReport(t *testing.T, r *report.Report) (dir, file string) {
	t.Helper()
	var buf bytes.Buffer
	if err := r.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	file = filepath.Join(dir, "report.json")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, file
}

// A value a logarithmic axis cannot place is refused with an error naming
// the flag and the curve, not a panic; on a linear axis it is drawn.
func TestPlot_LogAxisRefusesZero(t *testing.T) {
	r := &report.Report{Command: "go test -bench"}
	tb := report.NewTable(r, "members", "entry", "µs")
	tb.Row("10", "copy", "0.0")
	tb.Row("100", "copy", "0.3")
	dir, in := writeReport(t, r)
	o := plotOptions{inputs: []string{in}, x: "members", y: []string{"µs"}, series: "entry", out: filepath.Join(dir, "p.png"), logY: true}
	err := drawPlot(o)
	if err == nil || !strings.Contains(err.Error(), "--log-y") || !strings.Contains(err.Error(), "entry copy") {
		t.Fatalf("--log-y with a zero: %v, want an error naming --log-y and the curve", err)
	}
	o.logY = false
	if err := drawPlot(o); err != nil {
		t.Fatalf("linear axis with a zero: %v", err)
	}
}
