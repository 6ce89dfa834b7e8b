// Package report writes a chaos run's results: results.json (the verdict,
// every checker's anomalies with the operations that show them, operation
// counts by outcome, the schedule) and two pictures made with gonum/plot,
// latency.png (every operation's latency over time, coloured by outcome,
// fault periods shaded) and throughput.png (completed operations per second
// by outcome, fault periods shaded).
package report

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/cohortlabs/cohort/chaos/checker"
	"github.com/cohortlabs/cohort/chaos/history"
)

// Results is results.json.
type Results struct {
	Run       string                             `json:"run"`
	Valid     bool                               `json:"valid"`
	Seed      uint64                             `json:"seed"`
	Mode      string                             `json:"mode"`
	Security  string                             `json:"security,omitempty"` // "mutual TLS" or "plaintext"
	Nodes     int                                `json:"nodes"`
	Workload  string                             `json:"workload"`
	Nemesis   []string                           `json:"nemesis"`
	Dropped   []string                           `json:"nemesis_unavailable,omitempty"`
	Duration  string                             `json:"duration"`
	Faults    map[string]int                     `json:"faults_started"`
	Anomalies map[string]int                     `json:"anomalies_by_kind"`
	Ops       map[string]map[history.Outcome]int `json:"ops_by_f_and_outcome"`
	Checkers  []checker.Result                   `json:"checkers"`
	Exposure  Exposure                           `json:"exposure"`
	Schedule  any                                `json:"schedule,omitempty"`
	Notes     []string                           `json:"notes,omitempty"`
}

// maxAnomalies per checker kept in results.json (the count is complete).
const maxAnomalies = 25

// Summarise fills the counts of r from the history and the checker results.
func Summarise(r *Results, es []history.Entry, rs []checker.Result) {
	r.Valid = checker.Valid(rs)
	r.Exposure = Expose(es)
	r.Faults = map[string]int{}
	r.Anomalies = map[string]int{}
	r.Ops = map[string]map[history.Outcome]int{}
	for _, e := range es {
		switch e.Type {
		case history.TypeNemesis:
			if e.Phase == history.NemStart && !strings.HasPrefix(e.Note, "failed to start") {
				r.Faults[e.Fault]++
			}
		case history.TypeOp:
			if r.Ops[e.F] == nil {
				r.Ops[e.F] = map[history.Outcome]int{}
			}
			r.Ops[e.F][e.Outcome]++
		}
	}
	for _, c := range rs {
		for _, a := range c.Anomalies {
			r.Anomalies[a.Kind]++
		}
		if len(c.Anomalies) > maxAnomalies {
			c.Anomalies = c.Anomalies[:maxAnomalies]
		}
		r.Checkers = append(r.Checkers, c)
	}
}

// Write writes results.json into dir.
func Write(dir string, r *Results) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644)
}

// Text is the short human summary printed at the end of a run.
func Text(r *Results) string {
	var b strings.Builder
	verdict := "VALID"
	if !r.Valid {
		verdict = "INVALID"
	}
	mode := r.Mode + " mode"
	if r.Security != "" {
		mode += ", " + r.Security
	}
	fmt.Fprintf(&b, "run %s: %s (seed %d, %s, %d nodes, workload %s, %s)\n", r.Run, verdict, r.Seed, mode, r.Nodes, r.Workload, r.Duration)
	kinds := make([]string, 0, len(r.Faults))
	for k := range r.Faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, "  fault %-26s x%d\n", k, r.Faults[k])
	}
	fs := make([]string, 0, len(r.Ops))
	for f := range r.Ops {
		fs = append(fs, f)
	}
	sort.Strings(fs)
	for _, f := range fs {
		o := r.Ops[f]
		fmt.Fprintf(&b, "  ops %-10s ok %6d  fail %6d  info %6d\n", f, o[history.OK], o[history.Fail], o[history.Info])
	}
	for _, c := range r.Checkers {
		st := "valid"
		switch {
		case c.Skipped != "":
			st = "skipped: " + c.Skipped
		case !c.Valid:
			st = fmt.Sprintf("INVALID (%d anomalies)", len(c.Anomalies))
		}
		excused := ""
		if c.Excused > 0 {
			excused = fmt.Sprintf(", %d excused", c.Excused)
		}
		fmt.Fprintf(&b, "  check %-32s %s (%d checked%s)\n", c.Name, st, c.Checked, excused)
		for i, a := range c.Anomalies {
			if i == 5 {
				fmt.Fprintf(&b, "      …\n")
				break
			}
			fmt.Fprintf(&b, "      %s: %s\n", a.Kind, a.Message)
		}
	}
	b.WriteString(r.Exposure.text())
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	return b.String()
}

// period is one fault's time span, in seconds.
type period struct {
	kind   string
	x0, x1 float64
}

// faultPeriods pairs each nemesis start with its stop.
func faultPeriods(es []history.Entry, end float64) []period {
	var out []period
	open := map[string]float64{}
	for _, e := range es {
		if e.Type != history.TypeNemesis {
			continue
		}
		t := float64(e.Start) / 1e9
		switch e.Phase {
		case history.NemStart:
			if e.Note != "" && strings.HasPrefix(e.Note, "failed to start") {
				continue
			}
			open[e.Fault] = t
		case history.NemStop:
			if t0, ok := open[e.Fault]; ok {
				out = append(out, period{e.Fault, t0, t})
				delete(open, e.Fault)
			}
		}
	}
	for k, t0 := range open {
		out = append(out, period{k, t0, end})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].x0 < out[j].x0 })
	return out
}

// shading draws fault periods as translucent bands with their names.
type shading struct{ periods []period }

var faultColor = color.NRGBA{R: 255, G: 120, B: 0, A: 40}

func (s shading) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	sty := draw.TextStyle{Color: color.NRGBA{R: 150, G: 60, B: 0, A: 255}, Font: plot.DefaultFont, Rotation: math.Pi / 2,
		Handler: plot.DefaultTextHandler}
	sty.Font.Size = vg.Points(10)
	for i, pr := range s.periods {
		x0, x1 := trX(pr.x0), trX(pr.x1)
		c.FillPolygon(faultColor, c.ClipPolygonX([]vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}}))
		if x0 >= c.Min.X && x0 <= c.Max.X {
			y := c.Min.Y + vg.Points(4+float64(i%2)*70)
			c.FillText(sty, vg.Point{X: x0 + vg.Points(8), Y: y}, pr.kind)
		}
	}
}

var outcomeColors = map[history.Outcome]color.Color{
	history.OK:   color.NRGBA{R: 30, G: 140, B: 60, A: 160},
	history.Fail: color.NRGBA{R: 210, G: 30, B: 30, A: 200},
	history.Info: color.NRGBA{R: 40, G: 70, B: 220, A: 200},
}

// Plots writes latency.png and throughput.png into dir.
func Plots(dir, title string, es []history.Entry) error {
	var end float64
	pts := map[history.Outcome]plotter.XYs{}
	for _, e := range es {
		end = max(end, float64(max(e.Start, e.End))/1e9)
		if e.Type != history.TypeOp || e.End == 0 {
			continue
		}
		lat := float64(e.End-e.Start) / 1e6
		pts[e.Outcome] = append(pts[e.Outcome], plotter.XY{X: float64(e.Start) / 1e9, Y: math.Max(lat, 0.1)})
	}
	periods := faultPeriods(es, end)

	lp := plot.New()
	lp.Title.Text = title + ": latency of every operation"
	lp.X.Label.Text = "time since start (s)"
	lp.Y.Label.Text = "latency (ms, log)"
	lp.Y.Scale = plot.LogScale{}
	lp.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	lp.X.Min, lp.X.Max = 0, math.Max(end, 1)
	lp.Add(shading{periods})
	for _, o := range []history.Outcome{history.OK, history.Info, history.Fail} {
		if len(pts[o]) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts[o])
		if err != nil {
			return err
		}
		sc.GlyphStyle.Color = outcomeColors[o]
		sc.GlyphStyle.Radius = vg.Points(1.2)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		lp.Add(sc)
		lp.Legend.Add(fmt.Sprintf("%s (%d)", o, len(pts[o])), sc)
	}
	lp.Legend.Top = true
	lp.Legend.Left = true
	if err := lp.Save(16*vg.Inch, 6*vg.Inch, filepath.Join(dir, "latency.png")); err != nil {
		return fmt.Errorf("latency plot: %w", err)
	}

	tp := plot.New()
	tp.Title.Text = title + ": completed operations per second"
	tp.X.Label.Text = "time since start (s)"
	tp.Y.Label.Text = "operations / s"
	tp.X.Min, tp.X.Max = 0, math.Max(end, 1)
	tp.Add(shading{periods})
	buckets := int(math.Ceil(end)) + 1
	for _, o := range []history.Outcome{history.OK, history.Info, history.Fail} {
		counts := make([]float64, buckets)
		n := 0
		for _, e := range es {
			if e.Type == history.TypeOp && e.Outcome == o && e.End > 0 {
				b := int(float64(e.End) / 1e9)
				if b < buckets {
					counts[b]++
					n++
				}
			}
		}
		if n == 0 {
			continue
		}
		xys := make(plotter.XYs, buckets)
		for i := range xys {
			xys[i] = plotter.XY{X: float64(i), Y: counts[i]}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = outcomeColors[o]
		l.Width = vg.Points(1.2)
		tp.Add(l)
		tp.Legend.Add(string(o), l)
	}
	tp.Legend.Top = true
	tp.Legend.Left = true
	if err := tp.Save(16*vg.Inch, 5*vg.Inch, filepath.Join(dir, "throughput.png")); err != nil {
		return fmt.Errorf("throughput plot: %w", err)
	}
	return nil
}
