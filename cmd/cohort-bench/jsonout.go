package main

import (
	"encoding/json"
	"io"
	"strings"
	"sync"
	"time"
)

// jsonReport is what --json prints instead of text: every line a command
// writes (its title, the load average, notes) and every table, as rows of
// cells in the order of its columns (two columns may share a name, as
// "max" after two medians), so that scripts and plots read the figures
// without parsing aligned text.
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
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
