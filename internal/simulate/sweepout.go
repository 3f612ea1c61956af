package simulate

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/switchyard-llm/switchyard/internal/bench"
	"github.com/switchyard-llm/switchyard/internal/linkemu"
)

// SweepSchema names the --sweep --json format.
const SweepSchema = "switchyard-simulate-sweep/v1"

// WriteSweepJSON writes the ranked rows.
func WriteSweepJSON(path string, rows []Row, dims []Dim, minGood float64) error {
	out := struct {
		Schema  string  `json:"schema"`
		Dims    []Dim   `json:"dims"`
		MinGood float64 `json:"min_good"`
		Rows    []Row   `json:"rows"`
	}{SweepSchema, dims, minGood, rows}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("simulate: encode sweep: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("simulate: write --json: %w", err)
	}
	return nil
}

// WriteSweepPlot draws TTFT p50 against the sweep's link dimension (log
// scale, Gbit/s), or against the first dimension's position when there is
// no link dimension, with one line per combination of the other
// dimensions. reps are in Points(dims) order.
func WriteSweepPlot(path string, dims []Dim, reps []*bench.Report) error {
	xi := 0
	for i, d := range dims {
		if d.Key == "link" {
			xi = i
		}
	}
	isLink := dims[xi].Key == "link"
	p := plot.New()
	p.Title.Text = "simulated TTFT p50 by " + dims[xi].Key
	p.Y.Label.Text = "TTFT p50 (s)"
	p.X.Label.Text = dims[xi].Key
	if isLink {
		p.X.Label.Text = "link line rate (Gbit/s, log scale)"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	leg := plot.NewLegend() // drawn beside the data, never on it
	// With a link and a disagg dimension that includes never, plot each
	// mode's TTFT p50 as a multiple of never's at the same point: below 1
	// is where disaggregation starts to pay.
	di := -1
	for i, d := range dims {
		if d.Key == "disagg" && indexOf(d.Values, "never") >= 0 {
			di = i
		}
	}
	relative := isLink && di >= 0
	numeric := true
	for _, v := range dims[xi].Values {
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			numeric = false
		}
	}
	base := map[string]float64{}
	pts := Points(dims)
	if relative {
		p.Title.Text = "disaggregation against standalone (disagg never), by link rate"
		p.Y.Label.Text = "TTFT p50 ÷ never's (log scale)"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		for i, pt := range pts {
			if pt[di] == "never" {
				if v := reps[i].Runs[0].Aggregate.TTFTP50S; v != nil && *v > 0 {
					base[otherKey(dims, pt, xi, di)] = *v
				}
			}
		}
	}
	series := map[string]plotter.XYs{}
	var order []string
	for i, pt := range pts {
		if relative && pt[di] == "never" {
			continue
		}
		var key []string
		for k, v := range pt {
			if k != xi {
				key = append(key, dims[k].Key+"="+v)
			}
		}
		name := strings.Join(key, " ")
		if _, ok := series[name]; !ok {
			order = append(order, name)
		}
		x := float64(indexOf(dims[xi].Values, pt[xi]))
		if v, err := strconv.ParseFloat(pt[xi], 64); err == nil && numeric {
			x = v // workers, tp: plot the value, not its position
		}
		if isLink {
			r, err := linkemu.ParseRate(pt[xi])
			if err != nil {
				return err
			}
			x = float64(r) * 8 / 1e9
		}
		y := math.NaN()
		if v := reps[i].Runs[0].Aggregate.TTFTP50S; v != nil {
			y = *v
		}
		if relative {
			b, ok := base[otherKey(dims, pt, xi, di)]
			if !ok {
				continue
			}
			y /= b
		}
		if !math.IsNaN(y) {
			series[name] = append(series[name], plotter.XY{X: x, Y: y})
		}
	}
	for i, name := range order {
		if len(series[name]) == 0 {
			continue
		}
		l, err := plotter.NewLine(series[name])
		if err != nil {
			return fmt.Errorf("simulate: plot %s: %w", name, err)
		}
		l.Color = bench.PlotColor(i)
		l.Dashes = plotutil.Dashes(i / 7)
		l.Width = vg.Points(1.5)
		pts, _ := plotter.NewScatter(series[name])
		pts.Color = l.Color
		p.Add(l, pts)
		if name == "" {
			name = "TTFT p50"
		}
		leg.Add(name, l)
	}
	if relative && len(pts) > 0 {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, xys := range series {
			for _, v := range xys {
				lo, hi = min(lo, v.X), max(hi, v.X)
			}
		}
		if lo < hi {
			one, err := plotter.NewLine(plotter.XYs{{X: lo, Y: 1}, {X: hi, Y: 1}})
			if err == nil {
				one.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
				p.Add(one)
				leg.Add("disagg never (standalone) = 1", one)
			}
		}
	}
	return bench.SavePlot(p, leg, path)
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// otherKey names a point by every dimension but the x axis and disagg.
func otherKey(dims []Dim, pt Point, xi, di int) string {
	var key []string
	for k, v := range pt {
		if k != xi && k != di {
			key = append(key, dims[k].Key+"="+v)
		}
	}
	return strings.Join(key, " ")
}
