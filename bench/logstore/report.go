package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
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

// teeReport collects everything in the report and copies it to a second
// writer as text, so that a --json run shows its progress.
type teeReport struct {
	report   *jsonReport
	progress io.Writer
}

func (t teeReport) Write(p []byte) (int, error) {
	_, _ = t.progress.Write(p)
	return t.report.Write(p)
}

// table prints each row as it comes, right-aligned in columns as wide as
// their headers (at least minWidth; a store column fits every store's
// name), so that a 30-minute run shows its
// progress; and, when written to a *jsonReport or a teeReport, adds the
// rows to the report.
type table struct {
	w      io.Writer // text; nil for a report alone
	widths []int
	report *jsonReport
	json   *jsonReportTable
}

func newTable(w io.Writer, minWidth int, header ...string) *table {
	t := &table{w: w}
	switch r := w.(type) {
	case *jsonReport:
		t.w = nil
		t.report = r
	case teeReport:
		t.w = r.progress
		t.report = r.report
	}
	if t.report != nil {
		t.json = t.report.table(header)
	}
	if t.w == nil {
		return t
	}
	for _, h := range header {
		w := max(minWidth, utf8.RuneCountInString(h))
		if h == "store" {
			for _, s := range storeNames {
				w = max(w, len(s))
			}
		}
		t.widths = append(t.widths, w)
	}
	t.text(header)
	return t
}

func (t *table) row(cells ...string) {
	if t.report != nil {
		t.report.addRow(t.json, cells)
	}
	if t.w != nil {
		t.text(cells)
	}
}

func (t *table) text(cells []string) {
	var b strings.Builder
	for i, c := range cells {
		if i > 0 {
			b.WriteString("  ")
		}
		if i < len(t.widths) {
			b.WriteString(strings.Repeat(" ", max(0, t.widths[i]-utf8.RuneCountInString(c))))
		}
		b.WriteString(c)
	}
	fmt.Fprintln(t.w, b.String())
}
