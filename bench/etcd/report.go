package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// jsonReport is cohort-bench's --json document (cmd/cohort-bench/jsonout.go),
// field for field, so that `cohort-bench plot --in` reads this program's
// reports beside its own: every line written (title, load average, notes)
// and every table as rows of cells in column order.
type jsonReport struct {
	mu      sync.Mutex
	Command string             `json:"command"`
	Started time.Time          `json:"started"`
	Notes   []string           `json:"notes"`
	Tables  []*jsonReportTable `json:"tables"`
	pending strings.Builder    // a line not yet ended
}

type jsonReportTable struct {
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// Write collects text lines as notes.
func (r *jsonReport) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending.Write(p)
	for {
		s := r.pending.String()
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimSpace(s[:i]); line != "" {
			r.Notes = append(r.Notes, line)
		}
		r.pending.Reset()
		r.pending.WriteString(s[i+1:])
	}
	return len(p), nil
}

func (r *jsonReport) table(columns []string) *jsonReportTable {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := &jsonReportTable{Columns: columns, Rows: [][]string{}}
	r.Tables = append(r.Tables, t)
	return t
}

func (r *jsonReport) addRow(t *jsonReportTable, cells []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Rows = append(t.Rows, append([]string(nil), cells...))
}

// writeTo prints the report as one JSON document.
func (r *jsonReport) writeTo(w io.Writer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if line := strings.TrimSpace(r.pending.String()); line != "" {
		r.Notes = append(r.Notes, line)
	}
	if r.Notes == nil {
		r.Notes = []string{}
	}
	if r.Tables == nil {
		r.Tables = []*jsonReportTable{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// table prints aligned columns or, when written to a *jsonReport, adds
// them to the report.
type table struct {
	tw     *tabwriter.Writer
	report *jsonReport
	json   *jsonReportTable
}

func newTable(w io.Writer, header ...string) *table {
	if r, ok := w.(*jsonReport); ok {
		return &table{report: r, json: r.table(header)}
	}
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	if t.report != nil {
		t.report.addRow(t.json, cells)
		return
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t")+"\t")
}

func (t *table) flush() {
	if t.tw != nil {
		_ = t.tw.Flush()
	}
}
