package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/cohortlabs/cohort/bench/report"
)

// plotOptions draw one chart from --json reports.
type plotOptions struct {
	inputs     []string
	labels     []string // labels[i] names the curves of inputs[i]
	x, series  string
	y          []string
	filter     []string
	title      string
	xLabel     string
	yLabel     string
	logX, logY bool
	legend     string // top-left, top-right, bottom-left or bottom-right
	out        string
}

func newPlotCommand() *cobra.Command {
	var o plotOptions
	cmd := &cobra.Command{
		Use:   "plot",
		Short: "Draw a cost curve (PNG) from the tables of --json reports",
		Long: `plot reads reports written with --json and draws one curve per value of
--series: --y against --x, taken from the table that has those columns.
Cells are read as their leading number ("33.60 ms" is 33.6), so the axes
are in the unit the table prints. --where column=value keeps only matching
rows (repeatable). The figures in docs/benchmarks.md are drawn this way.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return drawPlot(o)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.inputs, "in", nil, "report files written with --json (repeatable)")
	f.StringSliceVar(&o.labels, "label", nil, "a name for each --in, in order, put before its curves' names (to compare runs: --in bolt.json --label bolt --in wal.json --label wal)")
	f.StringVar(&o.x, "x", "", "column for the x axis")
	f.StringSliceVar(&o.y, "y", nil, "column(s) for the y axis (the first column of that name); several: one curve each")
	f.StringVar(&o.series, "series", "", "column whose values split the rows into curves (default: one curve)")
	f.StringSliceVar(&o.filter, "where", nil, "column=value: keep only these rows (repeatable)")
	f.StringVar(&o.title, "title", "", "chart title")
	f.StringVar(&o.xLabel, "x-label", "", "x axis label (default: the column)")
	f.StringVar(&o.yLabel, "y-label", "", "y axis label (default: the column)")
	f.BoolVar(&o.logX, "log-x", false, "logarithmic x axis")
	f.BoolVar(&o.logY, "log-y", false, "logarithmic y axis")
	f.StringVar(&o.legend, "legend", "top-left", "corner of the legend: top-left, top-right, bottom-left or bottom-right")
	f.StringVar(&o.out, "out", "", "PNG file to write")
	_ = cmd.MarkFlagRequired("in")
	_ = cmd.MarkFlagRequired("x")
	_ = cmd.MarkFlagRequired("y")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

// curvePoints reads the rows of every report's tables that have the x and
// y columns, grouped by series value (in order of first appearance).
func curvePoints(o plotOptions) (names []string, curves map[string]plotter.XYs, err error) {
	curves = map[string]plotter.XYs{}
	if len(o.labels) > 0 && len(o.labels) != len(o.inputs) {
		return nil, nil, fmt.Errorf("%d --label for %d --in: give one label per input", len(o.labels), len(o.inputs))
	}
	for i, in := range o.inputs {
		b, err := os.ReadFile(in)
		if err != nil {
			return nil, nil, err
		}
		var r report.Report
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", in, err)
		}
		for _, t := range r.Tables {
			xi, si := slices.Index(t.Columns, o.x), slices.Index(t.Columns, o.series)
			if xi < 0 || (o.series != "" && si < 0) {
				continue
			}
			for _, y := range o.y {
				yi := slices.Index(t.Columns, y)
				if yi < 0 {
					continue
				}
				for _, row := range t.Rows {
					if !rowMatches(t.Columns, row, o.filter) {
						continue
					}
					xv, xerr := leadingNumber(row[xi])
					yv, yerr := leadingNumber(row[yi])
					if xerr != nil || yerr != nil {
						continue // a cell with no figure ("-")
					}
					var name []string
					if len(o.labels) > 0 {
						name = append(name, o.labels[i])
					}
					if len(o.y) > 1 {
						name = append(name, y)
					}
					if si >= 0 {
						name = append(name, o.series+" "+row[si])
					}
					n := strings.Join(name, ", ")
					if _, ok := curves[n]; !ok {
						names = append(names, n)
					}
					curves[n] = append(curves[n], plotter.XY{X: xv, Y: yv})
				}
			}
		}
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("no table in %v has columns %q and %q", o.inputs, o.x, strings.Join(o.y, ", "))
	}
	for _, n := range names {
		slices.SortFunc(curves[n], func(a, b plotter.XY) int {
			switch {
			case a.X < b.X:
				return -1
			case a.X > b.X:
				return 1
			}
			return 0
		})
	}
	return names, curves, nil
}

func rowMatches(columns, row []string, filter []string) bool {
	for _, f := range filter {
		col, want, _ := strings.Cut(f, "=")
		i := slices.Index(columns, col)
		if i < 0 || i >= len(row) || strings.TrimSpace(row[i]) != want {
			return false
		}
	}
	return true
}

// leadingNumber is the number a cell starts with ("33.60 ms", "1.22×").
func leadingNumber(cell string) (float64, error) {
	cell = strings.TrimSpace(cell)
	end := 0
	for end < len(cell) && strings.ContainsRune("0123456789.-+eE", rune(cell[end])) {
		end++
	}
	return strconv.ParseFloat(cell[:end], 64)
}

// checkLogAxes refuses a point a logarithmic axis cannot place (zero or
// below), naming the curve and the point, instead of leaving it to the
// plotting library (which panics).
func checkLogAxes(o plotOptions, names []string, curves map[string]plotter.XYs) error {
	for _, n := range names {
		for _, pt := range curves[n] {
			if o.logX && pt.X <= 0 {
				return fmt.Errorf("curve %q has %s = %g: --log-x needs every value above zero (drop --log-x, or leave the row out with --where)", n, o.x, pt.X)
			}
			if o.logY && pt.Y <= 0 {
				return fmt.Errorf("curve %q has a point at %s = %g with y = %g: --log-y needs every value above zero (drop --log-y, or leave the row out with --where)", n, o.x, pt.X, pt.Y)
			}
		}
	}
	return nil
}

func drawPlot(o plotOptions) error {
	names, curves, err := curvePoints(o)
	if err != nil {
		return err
	}
	if err := checkLogAxes(o, names, curves); err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = o.title
	p.X.Label.Text, p.Y.Label.Text = o.x, strings.Join(o.y, ", ")
	if o.xLabel != "" {
		p.X.Label.Text = o.xLabel
	}
	if o.yLabel != "" {
		p.Y.Label.Text = o.yLabel
	}
	if o.logX {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	if o.logY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	// Cost curves rise to the right, so top-left is the default; a flat
	// curve near the top wants another corner.
	switch o.legend {
	case "top-left", "":
		p.Legend.Top, p.Legend.Left = true, true
	case "top-right":
		p.Legend.Top = true
	case "bottom-left":
		p.Legend.Left = true
	case "bottom-right":
	default:
		return fmt.Errorf("--legend %q: want top-left, top-right, bottom-left or bottom-right", o.legend)
	}
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), vg.Points(-4) // inward from the corner
	if !p.Legend.Left {
		p.Legend.XOffs = vg.Points(-8)
	}
	if !p.Legend.Top {
		p.Legend.YOffs = vg.Points(4)
	}
	for i, n := range names {
		line, points, err := plotter.NewLinePoints(curves[n])
		if err != nil {
			return err
		}
		c := plotutil.Color(i)
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		points.Shape = plotutil.Shape(i)
		points.Radius = vg.Points(3)
		p.Add(line, points)
		if n != "" {
			p.Legend.Add(n, line, points)
		}
	}
	p.BackgroundColor = color.White
	return p.Save(7*vg.Inch, 4.5*vg.Inch, o.out)
}
