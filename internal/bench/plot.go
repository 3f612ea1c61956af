package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// PlotPaths returns the two files WritePlots writes for path: the TTFT CDF
// at path and the hit ratio over time at path with "-hits" before ".png".
// A disagg report's second file is PlotFiles's "-sizes" plot instead.
func PlotPaths(path string) (cdf, hits string) {
	base := strings.TrimSuffix(path, ".png")
	return base + ".png", base + "-hits.png"
}

// PlotFiles returns the files WritePlots writes for rep: the TTFT CDF, then
// TTFT by prompt size (disagg, whose prompts are unique, so a hit ratio
// says nothing) or the hit ratio over time (every other scenario).
func PlotFiles(path string, rep *Report) []string {
	cdf, hits := PlotPaths(path)
	if isSizeSweep(rep) {
		return []string{cdf, strings.TrimSuffix(path, ".png") + "-sizes.png"}
	}
	return []string{cdf, hits}
}

func isSizeSweep(rep *Report) bool {
	return rep.Scenario == ScenarioDisagg && len(rep.Runs) > 0 && len(rep.Runs[0].Groups) > 0
}

// WritePlots renders the TTFT CDF (one line per policy, or per prompt size
// for a single disagg run) and the cumulative token hit ratio over request
// start time (one line per policy).
func WritePlots(path string, rep *Report) error {
	if len(rep.Runs) == 0 {
		return fmt.Errorf("bench: plot: report has no runs")
	}
	files := PlotFiles(path, rep)
	cdfPath, hitsPath := files[0], files[1]

	p := plot.New()
	p.Title.Text = fmt.Sprintf("TTFT CDF — %s", rep.Scenario)
	p.X.Label.Text = "TTFT (s)"
	p.Y.Label.Text = "fraction of all requests (failed ones never arrive)"
	p.X.Min, p.Y.Min, p.Y.Max = 0, 0, 1
	p.X.Tick.Marker, p.Y.Tick.Marker = niceTicks{}, niceTicks{}
	leg := plot.NewLegend()
	var series []struct {
		name string
		recs []Record
	}
	if len(rep.Runs) == 1 && len(rep.Runs[0].Groups) > 0 {
		for _, g := range rep.Runs[0].Groups {
			var rs []Record
			for _, r := range rep.Runs[0].Records {
				if !r.Warmup && r.Group == g.Key {
					rs = append(rs, r)
				}
			}
			series = append(series, struct {
				name string
				recs []Record
			}{g.Key + " tokens", rs})
		}
	} else {
		for _, run := range rep.Runs {
			series = append(series, struct {
				name string
				recs []Record
			}{runName(run), run.Records})
		}
	}
	type curve struct {
		xys    plotter.XYs
		n, bad int
	}
	curves := make([]curve, len(series))
	xmax := 0.0
	for i, s := range series {
		var ttft []float64
		c := &curves[i]
		for _, r := range s.recs {
			if r.Warmup {
				continue
			}
			c.n++ // failures stay in the denominator: the CDF tops out below 1
			if r.Outcome == OutcomeOK {
				ttft = append(ttft, r.TTFTS)
			} else {
				c.bad++
			}
		}
		slices.Sort(ttft)
		// A step function, as an empirical CDF is: flat between samples,
		// rising at each; from 0 at the first sample.
		c.xys = make(plotter.XYs, 0, 2*len(ttft))
		for j, v := range ttft {
			c.xys = append(c.xys, plotter.XY{X: v, Y: float64(j) / float64(c.n)}, plotter.XY{X: v, Y: float64(j+1) / float64(c.n)})
			xmax = max(xmax, v)
		}
	}
	if xmax == 0 {
		xmax = 1
	}
	p.X.Max = xmax * 1.05
	anyBad := false
	for i, c := range curves {
		if c.n == 0 {
			continue
		}
		name := okLabel(series[i].name, c.n, c.bad)
		anyBad = anyBad || c.bad > 0
		if len(c.xys) > 0 {
			if err := addLine(p, &leg, i, name, c.xys); err != nil {
				return err
			}
		}
		if c.bad > 0 {
			// Failed requests have no TTFT: a dashed line at the success
			// fraction shows where the curve stops and how far below 1.
			ok := float64(c.n-c.bad) / float64(c.n)
			from := 0.0
			if len(c.xys) > 0 {
				from = c.xys[len(c.xys)-1].X
			}
			l, err := plotter.NewLine(plotter.XYs{{X: from, Y: ok}, {X: p.X.Max, Y: ok}})
			if err != nil {
				return fmt.Errorf("bench: plot %s: %w", name, err)
			}
			l.Color, l.Width, l.Dashes = PlotColor(i), vg.Points(1.5), []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(l)
			if len(c.xys) == 0 {
				leg.Add(name, l)
			}
		}
	}
	if anyBad {
		note, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 0, Y: 0}})
		if err != nil {
			return fmt.Errorf("bench: plot: %w", err)
		}
		note.Color, note.Width, note.Dashes = color.Gray{Y: 110}, vg.Points(1.5), []vg.Length{vg.Points(4), vg.Points(3)}
		leg.Add("dashed: failed requests", note)
		leg.Add("cap the curve below 1")
	}
	if err := savePlot(p, leg, cdfPath); err != nil {
		return err
	}

	if isSizeSweep(rep) {
		return writeSizesPlot(hitsPath, rep)
	}
	h := plot.New()
	h.Title.Text = "cumulative cache hit ratio (cached ÷ prompt tokens)"
	h.X.Label.Text = "request start (s)"
	h.Y.Label.Text = "hit ratio"
	h.X.Min, h.Y.Min = 0, 0
	h.X.Tick.Marker, h.Y.Tick.Marker = niceTicks{}, niceTicks{}
	hleg := plot.NewLegend()
	ymax := 0.0
	for i, run := range rep.Runs {
		recs := slices.Clone(run.Records)
		slices.SortFunc(recs, func(a, b Record) int {
			switch {
			case a.StartS < b.StartS:
				return -1
			case a.StartS > b.StartS:
				return 1
			}
			return 0
		})
		var xys plotter.XYs
		var cached, prompt int
		for _, r := range recs {
			if r.Warmup || r.Outcome != OutcomeOK || r.PromptTokens == 0 {
				continue
			}
			cached += r.CachedTokens
			prompt += r.PromptTokens
			xys = append(xys, plotter.XY{X: r.StartS, Y: float64(cached) / float64(prompt)})
		}
		if len(xys) == 0 {
			continue
		}
		for _, xy := range xys {
			ymax = max(ymax, xy.Y)
		}
		if err := addLine(h, &hleg, i, runName(run), xys); err != nil {
			return err
		}
	}
	// Scale to the data: hit ratios of a few percent flattened against a
	// 0–1 axis show no difference between policies.
	h.Y.Max = min(1, niceCeil(ymax*1.1))
	if h.Y.Max <= 0 {
		h.Y.Max = 1
	}
	return savePlot(h, hleg, hitsPath)
}

// plotW and plotH are the size of every bench plot.
const (
	plotW = 8 * vg.Inch
	plotH = 4.5 * vg.Inch
)

// palette is Okabe and Ito's colour-blind-safe set, darkest first: no two
// of its colours are near each other, as two of plotutil's reds are.
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255},   // blue
	color.RGBA{213, 94, 0, 255},    // vermillion
	color.RGBA{0, 158, 115, 255},   // bluish green
	color.RGBA{204, 121, 167, 255}, // reddish purple
	color.RGBA{230, 159, 0, 255},   // orange
	color.RGBA{86, 180, 233, 255},  // sky blue
	color.RGBA{0, 0, 0, 255},       // black
	color.RGBA{240, 228, 66, 255},  // yellow
}

// PlotColor is the i-th line colour of every plot bench and simulate draw.
func PlotColor(i int) color.Color { return palette[i%len(palette)] }

// SavePlot is savePlot for the other commands' plots.
func SavePlot(p *plot.Plot, leg plot.Legend, path string) error { return savePlot(p, leg, path) }

// savePlot writes p as a PNG with leg to the right of the data, never on
// it.
func savePlot(p *plot.Plot, leg plot.Legend, path string) error {
	c := vgimg.New(plotW, plotH)
	dc := draw.New(c)
	leg.Top, leg.Left = true, true
	leg.Padding = vg.Points(4)
	pad := vg.Points(10)
	legW := leg.Rectangle(dc).Size().X + pad
	p.Draw(draw.Crop(dc, 0, -legW, 0, 0))
	// Below the title, level with the top of the data area.
	leg.Draw(draw.Crop(dc, plotW-legW+pad/2, 0, 0, -p.Title.TextStyle.FontExtents().Height-pad))
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: save plot %s: %w", path, err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("bench: save plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench: save plot %s: %w", path, err)
	}
	return nil
}

// runName labels a run's line: its policy and disaggregation mode, as the
// table names it.
func runName(r PolicyRun) string {
	if r.Policy == "" && r.DisaggMode == "" {
		return "as deployed"
	}
	return runLabel(r)
}

func addLine(p *plot.Plot, leg *plot.Legend, i int, name string, xys plotter.XYs) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("bench: plot %s: %w", name, err)
	}
	l.Color = PlotColor(i)
	l.Width = vg.Points(1.5)
	p.Add(l)
	leg.Add(name, l)
	return nil
}

// niceTicks puts major ticks at 1, 2 or 5 × a power of ten, about five to
// an axis, labelled with no more decimals than the step needs, and minor
// ticks between them.
type niceTicks struct{}

// Ticks implements plot.Ticker.
func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', 4, 64)}}
	}
	step, minor := niceStep((hi - lo) / 5)
	decimals := max(0, -int(math.Floor(math.Log10(step)+1e-9)))
	var ticks []plot.Tick
	first := math.Ceil(lo/minor - 1e-9)
	for i := first; i*minor <= hi+minor*1e-9; i++ {
		v := i * minor
		if math.Abs(v) < minor*1e-6 {
			v = 0 // never "-0.0"
		}
		t := plot.Tick{Value: v}
		if r := v / step; math.Abs(r-math.Round(r)) < 1e-6 {
			t.Label = strconv.FormatFloat(v, 'f', decimals, 64)
			if v == 0 {
				t.Label = "0"
			}
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// niceStep returns the smallest of 1, 2, 5 × 10^k at least raw, and the
// minor step that divides it.
func niceStep(raw float64) (step, minor float64) {
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw*(1-1e-9) {
			step = m * mag
			break
		}
	}
	switch step / mag {
	case 2:
		minor = step / 2
	default:
		minor = step / 5
	}
	return step, minor
}

// niceCeil rounds v up to a 1-2-5 tick step.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 0
	}
	step, _ := niceStep(v / 5)
	return math.Ceil(v/step-1e-9) * step
}

// writeSizesPlot draws a prompt-size sweep: the measured TTFT median per
// size, and the gate's prediction where the frontend gave one, one pair of
// lines per run.
func writeSizesPlot(path string, rep *Report) error {
	p := plot.New()
	p.Title.Text = "TTFT by prompt size — disagg"
	p.X.Label.Text = "prompt tokens"
	p.Y.Label.Text = "TTFT (s)"
	p.X.Min, p.Y.Min = 0, 0
	p.X.Tick.Marker, p.Y.Tick.Marker = niceTicks{}, niceTicks{}
	leg := plot.NewLegend()
	ymax, xmax := 0.0, 0.0
	for i, run := range rep.Runs {
		var meas, pred plotter.XYs
		for _, g := range run.Groups {
			n, err := strconv.Atoi(g.Key)
			if err != nil {
				continue
			}
			if q := g.Aggregate.TTFT.P50; q != nil {
				meas = append(meas, plotter.XY{X: float64(n), Y: *q})
				ymax = max(ymax, *q)
			}
			if g.PredictedTTFTMsMean != nil {
				pred = append(pred, plotter.XY{X: float64(n), Y: *g.PredictedTTFTMsMean / 1000})
				ymax = max(ymax, *g.PredictedTTFTMsMean/1000)
			}
			xmax = max(xmax, float64(n))
		}
		name := runName(run)
		if run.DisaggMode != "" {
			name = runLabel(run)
		}
		if len(meas) > 0 {
			l, pts, err := plotter.NewLinePoints(meas)
			if err != nil {
				return fmt.Errorf("bench: plot %s: %w", name, err)
			}
			l.Color, l.Width = PlotColor(i), vg.Points(1.5)
			pts.Color, pts.Radius = PlotColor(i), vg.Points(3)
			p.Add(l, pts)
			leg.Add(name+": measured p50", l, pts)
		}
		if len(pred) > 0 {
			l, err := plotter.NewLine(pred)
			if err != nil {
				return fmt.Errorf("bench: plot %s: %w", name, err)
			}
			l.Color, l.Width, l.Dashes = PlotColor(i), vg.Points(1.5), []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(l)
			leg.Add(name+": gate's prediction", l)
		}
	}
	p.X.Max = niceCeil(xmax * 1.05)
	p.Y.Max = niceCeil(ymax * 1.1)
	if p.Y.Max <= 0 {
		p.Y.Max = 1
	}
	return savePlot(p, leg, path)
}

// okLabel is a CDF curve's legend entry: its name and, when some of its n
// requests failed, the share that succeeded, where the curve stops.
func okLabel(name string, n, bad int) string {
	if bad == 0 || n == 0 {
		return name
	}
	return fmt.Sprintf("%s: %.1f%% ok, %d failed", name, 100*float64(n-bad)/float64(n), bad)
}
