package bench

import (
	"fmt"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// PlotPaths returns the two files WritePlots writes for path: the TTFT CDF
// at path and the hit ratio over time at path with "-hits" before ".png".
func PlotPaths(path string) (cdf, hits string) {
	base := strings.TrimSuffix(path, ".png")
	return base + ".png", base + "-hits.png"
}

// WritePlots renders the TTFT CDF (one line per policy, or per prompt size
// for a single disagg run) and the cumulative token hit ratio over request
// start time (one line per policy).
func WritePlots(path string, rep *Report) error {
	if len(rep.Runs) == 0 {
		return fmt.Errorf("bench: plot: report has no runs")
	}
	cdfPath, hitsPath := PlotPaths(path)

	p := plot.New()
	p.Title.Text = fmt.Sprintf("TTFT CDF — %s", rep.Scenario)
	p.X.Label.Text = "TTFT (s)"
	p.Y.Label.Text = "fraction of requests"
	p.Legend.Top, p.Legend.Left = false, false
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
	for i, s := range series {
		var ttft []float64
		n := 0
		for _, r := range s.recs {
			if r.Warmup {
				continue
			}
			n++ // failures stay in the denominator: the CDF tops out below 1
			if r.Outcome == OutcomeOK {
				ttft = append(ttft, r.TTFTS)
			}
		}
		slices.Sort(ttft)
		if len(ttft) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(ttft))
		for j, v := range ttft {
			xys[j] = plotter.XY{X: v, Y: float64(j+1) / float64(n)}
		}
		if err := addLine(p, i, s.name, xys); err != nil {
			return err
		}
	}
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, cdfPath); err != nil {
		return fmt.Errorf("bench: save plot %s: %w", cdfPath, err)
	}

	h := plot.New()
	h.Title.Text = "cumulative cache hit ratio (cached ÷ prompt tokens)"
	h.X.Label.Text = "request start (s)"
	h.Y.Label.Text = "hit ratio"
	h.Y.Min, h.Y.Max = 0, 1
	h.Legend.Top, h.Legend.Left = false, false
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
		if err := addLine(h, i, runName(run), xys); err != nil {
			return err
		}
	}
	if err := h.Save(7*vg.Inch, 4.5*vg.Inch, hitsPath); err != nil {
		return fmt.Errorf("bench: save plot %s: %w", hitsPath, err)
	}
	return nil
}

func runName(r PolicyRun) string {
	if r.Policy == "" {
		return "as deployed"
	}
	return r.Policy
}

func addLine(p *plot.Plot, i int, name string, xys plotter.XYs) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("bench: plot %s: %w", name, err)
	}
	l.Color = plotutil.Color(i)
	l.Width = vg.Points(1.5)
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}
