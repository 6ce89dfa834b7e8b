package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/cohortlabs/cohort/bench/report"
)

// teeReport collects everything in the report and copies it to a second
// writer as text, so that a --json run shows its progress.
type teeReport struct {
	report   *report.Report
	progress io.Writer
}

func (t teeReport) Write(p []byte) (int, error) {
	_, _ = t.progress.Write(p)
	return t.report.Write(p)
}

// table prints each row as it comes, right-aligned in columns as wide as
// their headers (at least minWidth; a store column fits every store's
// name), so that a 30-minute run shows its
// progress; and, when written to a *report.Report or a teeReport, adds the
// rows to the report.
type table struct {
	w      io.Writer // text; nil for a report alone
	widths []int
	report *report.Report
	json   *report.ReportTable
}

func newTable(w io.Writer, minWidth int, header ...string) *table {
	t := &table{w: w}
	switch r := w.(type) {
	case *report.Report:
		t.w = nil
		t.report = r
	case teeReport:
		t.w = r.progress
		t.report = r.report
	}
	if t.report != nil {
		t.json = t.report.AddTable(header)
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
		t.report.AddRow(t.json, cells)
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
