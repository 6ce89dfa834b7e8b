// Package report is what Cohort's benchmark programs share: the --json
// document (notes and tables) that `cohort-bench plot` reads, the text
// table beside it, and the measurement helpers every figure goes through
// (percentiles, process CPU, the machine's load average, cell formats).
// cohort-bench and the comparison targets under bench/ (each its own
// module, which imports this one) use it, so that their reports read
// alike and plot together. It imports nothing but the standard library.
package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
)

// Report is what --json prints instead of text: every line a program
// writes to it (its title, the load average, notes) and every table, as
// rows of cells in the order of its columns (two columns may share a name,
// as "max" after two medians), so that scripts and plots read the figures
// without parsing aligned text.
type Report struct {
	mu      sync.Mutex
	Command string          `json:"command"`
	Started time.Time       `json:"started"`
	Notes   []string        `json:"notes"`
	Tables  []*ReportTable  `json:"tables"`
	pending strings.Builder // a line not yet ended
}

// ReportTable is one table of a Report.
type ReportTable struct {
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// Write collects text lines as notes.
func (r *Report) Write(p []byte) (int, error) {
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

// AddTable starts a table with these columns.
func (r *Report) AddTable(columns []string) *ReportTable {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := &ReportTable{Columns: columns, Rows: [][]string{}}
	r.Tables = append(r.Tables, t)
	return t
}

// AddRow adds a row of cells to t, one of r's tables.
func (r *Report) AddRow(t *ReportTable, cells []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Rows = append(t.Rows, slices.Clone(cells))
}

// Encode prints the report as one JSON document.
func (r *Report) Encode(w io.Writer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if line := strings.TrimSpace(r.pending.String()); line != "" {
		r.Notes = append(r.Notes, line)
		r.pending.Reset()
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Table prints aligned columns, or, when its writer is a *Report, adds
// them to the report.
type Table struct {
	tw     *tabwriter.Writer
	report *Report
	json   *ReportTable
}

// NewTable starts a table on w with its header row.
func NewTable(w io.Writer, header ...string) *Table {
	if r, ok := w.(*Report); ok {
		return &Table{report: r, json: r.AddTable(header)}
	}
	t := &Table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)}
	t.Row(header...)
	return t
}

// Row adds one row.
func (t *Table) Row(cells ...string) {
	if t.report != nil {
		t.report.AddRow(t.json, cells)
		return
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t")+"\t")
}

// Flush prints the rows so far (text tables align on it).
func (t *Table) Flush() {
	if t.tw != nil {
		_ = t.tw.Flush()
	}
}

// Percentiles returns p50, p99 and max of ds (which it sorts).
func Percentiles(ds []time.Duration) (p50, p99, maxD time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	at := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return at(0.50), at(0.99), ds[len(ds)-1]
}

// ProcessCPU is the CPU time (user and system) this process has used so
// far: with an in-process cluster, the nodes' and the load's work. On a
// shared machine CPU per operation varies far less than throughput.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// PidCPU is the CPU time (user and system) process pid has used so far,
// from /proc/<pid>/stat (0 when it cannot be read: the process is gone).
// The kernel reports it in USER_HZ ticks, 100 a second on Linux.
func PidCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: fields are
	// counted after its closing one (utime and stime are fields 14 and 15
	// of the line, 12 and 13 after the name).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	const userHZ = 100
	return time.Duration(utime+stime) * time.Second / userHZ
}

// LoadLine describes the machine's load, recorded with every result.
func LoadLine() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load average unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "load average unknown"
	}
	return fmt.Sprintf("load average %s %s %s", f[0], f[1], f[2])
}

// MS formats a duration as milliseconds with two decimals ("2.54 ms").
func MS(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000)
}

// US formats a duration as whole microseconds ("159 µs").
func US(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }

// PerSec formats a rate as a whole number.
func PerSec(v float64) string { return fmt.Sprintf("%.0f", v) }

// ErrNote is a phase's error count, with the first error when there was one.
func ErrNote(errors int, first error) string {
	if errors == 0 {
		return "0"
	}
	msg := fmt.Sprint(first)
	if len(msg) > 120 {
		msg = msg[:120] + "…"
	}
	return fmt.Sprintf("%d (first: %s)", errors, msg)
}
