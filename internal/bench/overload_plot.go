package bench

import (
	"fmt"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// OverloadPlotPaths are the files WriteOverloadPlots writes for path: the
// outcome of each class's requests at path, their TTFT with "-ttft".
func OverloadPlotPaths(path string) (outcomes, ttft string) {
	base := strings.TrimSuffix(path, ".png")
	return base + ".png", base + "-ttft.png"
}

// WriteOverloadPlots writes two PNG bar charts of r, one group of bars per
// (tenant, priority) class: requests served, shed (429) and abandoned; and
// TTFT p50 and p99 of the served ones.
func WriteOverloadPlots(path string, r *OverloadReport) error {
	outcomes, ttft := OverloadPlotPaths(path)
	names := make([]string, len(r.Classes))
	for i, c := range r.Classes {
		names[i] = c.Tenant + " " + c.Priority
	}
	series := func(f func(c OverloadClass) float64) plotter.Values {
		v := make(plotter.Values, len(r.Classes))
		for i, c := range r.Classes {
			v[i] = f(c)
		}
		return v
	}
	bars := func(title, ylabel, file string, labels []string, vals []plotter.Values) error {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = ylabel
		p.NominalX(names...)
		var leg plot.Legend = plot.NewLegend()
		w := vg.Points(60 / float64(len(vals)))
		for i, v := range vals {
			b, err := plotter.NewBarChart(v, w)
			if err != nil {
				return fmt.Errorf("bench: plot %s: %w", labels[i], err)
			}
			b.Color = PlotColor(i)
			b.LineStyle.Width = 0
			b.Offset = w * vg.Length(float64(i)-float64(len(vals)-1)/2)
			p.Add(b)
			leg.Add(labels[i], b)
		}
		return savePlot(p, leg, file)
	}
	if err := bars(fmt.Sprintf("Requests by class, %.0f s closed loop", r.DurationS), "requests", outcomes,
		[]string{"served", "shed (429)", "abandoned"}, []plotter.Values{
			series(func(c OverloadClass) float64 { return float64(c.Served) }),
			series(func(c OverloadClass) float64 { return float64(c.Shed) }),
			series(func(c OverloadClass) float64 { return float64(c.Abandoned) }),
		}); err != nil {
		return err
	}
	return bars("TTFT of served requests by class", "seconds", ttft, []string{"p50", "p99"}, []plotter.Values{
		series(func(c OverloadClass) float64 { return c.TTFTP50 }),
		series(func(c OverloadClass) float64 { return c.TTFTP99 }),
	})
}
