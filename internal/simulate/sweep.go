package simulate

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bench"
	"github.com/switchyard-llm/switchyard/internal/gate"
	"github.com/switchyard-llm/switchyard/internal/linkemu"
)

// Dim is one sweep dimension: a setting and the values it takes.
type Dim struct {
	Key    string
	Values []string
}

// DimKeys are the settings a sweep can vary.
var DimKeys = []string{"workers", "prefill-workers", "router", "disagg", "link", "gpu", "model", "tp"}

// ParseDim parses "KEY=V1,V2,...".
func ParseDim(s string) (Dim, error) {
	k, v, ok := strings.Cut(s, "=")
	k = strings.TrimSpace(k)
	if !ok || v == "" {
		return Dim{}, fmt.Errorf("simulate: sweep %q: want KEY=V1,V2 with KEY one of %s", s, strings.Join(DimKeys, ", "))
	}
	known := false
	for _, d := range DimKeys {
		known = known || d == k
	}
	if !known {
		return Dim{}, fmt.Errorf("simulate: sweep key %q: want one of %s", k, strings.Join(DimKeys, ", "))
	}
	d := Dim{Key: k}
	for _, x := range strings.Split(v, ",") {
		if x = strings.TrimSpace(x); x != "" {
			d.Values = append(d.Values, x)
		}
	}
	if len(d.Values) == 0 {
		return Dim{}, fmt.Errorf("simulate: sweep %q: no values", s)
	}
	return d, nil
}

// Apply sets one dimension's value in c.
func Apply(c *Config, key, value string) error {
	atoi := func() (int, error) {
		n, err := strconv.Atoi(value)
		if err != nil {
			return 0, fmt.Errorf("simulate: sweep %s=%q: not an integer", key, value)
		}
		return n, nil
	}
	var err error
	switch key {
	case "workers":
		c.Workers, err = atoi()
	case "prefill-workers":
		c.PrefillWorkers, err = atoi()
	case "tp":
		c.Engine.TP, err = atoi()
	case "router":
		c.Router = value
	case "disagg":
		c.Disagg = gate.Mode(value)
	case "gpu":
		c.Engine.GPU = value
	case "model":
		c.Engine.Model = value
	case "link":
		var r linkemu.Rate
		if r, err = linkemu.ParseRate(value); err == nil {
			c.LinkRate = r
		}
	default:
		err = fmt.Errorf("simulate: unknown sweep key %q", key)
	}
	return err
}

// Point is one configuration of a sweep: its dimension values, in the
// order the dimensions were given.
type Point []string

// Points is the cross product of dims, the first dimension varying slowest.
func Points(dims []Dim) []Point {
	out := []Point{{}}
	for _, d := range dims {
		var next []Point
		for _, p := range out {
			for _, v := range d.Values {
				next = append(next, append(append(Point{}, p...), v))
			}
		}
		out = next
	}
	return out
}

// Row is one simulated configuration's outcome.
type Row struct {
	Point       Point   `json:"point"`
	Label       string  `json:"label"`
	GPUs        int     `json:"gpus"`
	Requests    int     `json:"requests"`
	GoodShare   float64 `json:"good_share"` // good requests ÷ requests
	GoodputRPS  float64 `json:"goodput_rps"`
	GoodputGPU  float64 `json:"goodput_per_gpu"`
	TTFTP50S    float64 `json:"ttft_p50_s"`
	TTFTP99S    float64 `json:"ttft_p99_s"`
	HitRatio    float64 `json:"hit_ratio"`
	Remote      int     `json:"prefill_remote"`
	USDPerMTok  float64 `json:"usd_per_million_tokens"`
	Recommended bool    `json:"recommended"`
	Meets       bool    `json:"meets_min_good"`
}

// RowOf summarises a report for the sweep table.
func RowOf(p Point, dims []Dim, rep *bench.Report, minGood float64) Row {
	a := rep.Runs[0].Aggregate
	parts := make([]string, len(p))
	for i, v := range p {
		parts[i] = dims[i].Key + "=" + v
	}
	r := Row{Point: p, Label: strings.Join(parts, " "), GPUs: rep.Simulation.GPUs, Requests: a.Requests,
		GoodputRPS: a.GoodputRPS, GoodputGPU: rep.Simulation.GoodputPerGPU, HitRatio: a.HitRatio,
		Remote: a.PrefillRemote, USDPerMTok: rep.Simulation.USDPerMillionTokens}
	if a.Requests > 0 {
		r.GoodShare = float64(a.GoodRequests) / float64(a.Requests)
	}
	if a.TTFTP50S != nil {
		r.TTFTP50S = *a.TTFTP50S
	}
	if a.TTFTP99S != nil {
		r.TTFTP99S = *a.TTFTP99S
	}
	r.Meets = r.GoodShare >= minGood
	return r
}

// Rank orders rows for a capacity planner: configurations that meet the
// SLO for at least minGood of requests first, each group by goodput per GPU
// (then fewer GPUs, then label, so the order is total); the first row that
// meets it is recommended. A sweep where none meets it recommends nothing.
func Rank(rows []Row) {
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Meets != b.Meets {
			return a.Meets
		}
		if a.GoodputGPU != b.GoodputGPU {
			return a.GoodputGPU > b.GoodputGPU
		}
		if a.GPUs != b.GPUs {
			return a.GPUs < b.GPUs
		}
		// On a goodput tie, the configuration that answers sooner is the
		// better one, not the first in the alphabet.
		if a.TTFTP50S != b.TTFTP50S {
			return a.TTFTP50S < b.TTFTP50S
		}
		if a.TTFTP99S != b.TTFTP99S {
			return a.TTFTP99S < b.TTFTP99S
		}
		return a.Label < b.Label
	})
	for i := range rows {
		rows[i].Recommended = i == 0 && rows[i].Meets
	}
}

// Sweep runs base once per point of dims, in order, and returns the ranked
// rows and the reports by point order. each, if set, is called before each
// run with its index and label.
func Sweep(ctx context.Context, base Config, dims []Dim, minGood float64, each func(i, n int, label string) func(done, total int, virtual time.Duration)) ([]Row, []*bench.Report, error) {
	pts := Points(dims)
	var rows []Row
	var reps []*bench.Report
	for i, p := range pts {
		c := base
		for k, v := range p {
			if err := Apply(&c, dims[k].Key, v); err != nil {
				return nil, nil, err
			}
		}
		label := RowOf(p, dims, &bench.Report{Runs: []bench.PolicyRun{{}}, Simulation: &bench.Simulation{}}, 0).Label
		if err := c.Validate(); err != nil {
			return nil, nil, fmt.Errorf("simulate: sweep point %s: %w", label, err)
		}
		if each != nil {
			c.Progress = each(i, len(pts), label)
		}
		rep, err := Run(ctx, c)
		if err != nil {
			return nil, nil, fmt.Errorf("simulate: sweep point %s: %w", label, err)
		}
		reps = append(reps, rep)
		rows = append(rows, RowOf(p, dims, rep, minGood))
	}
	ranked := append([]Row(nil), rows...)
	Rank(ranked)
	return ranked, reps, nil
}

// WriteSweepTable prints the ranked rows.
func WriteSweepTable(w io.Writer, rows []Row, minGood float64, slo string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\tconfiguration\tGPUs\tgood %\tgoodput req/s\tgoodput/GPU\tTTFT p50 ms\tTTFT p99 ms\thit ratio\tremote\t$/M tokens\t")
	for i, r := range rows {
		mark := ""
		if r.Recommended {
			mark = " *"
		}
		fmt.Fprintf(tw, "%d%s\t%s\t%d\t%.1f\t%.2f\t%.4f\t%.1f\t%.1f\t%.3f\t%d\t%.3f\t\n", i+1, mark, r.Label, r.GPUs,
			100*r.GoodShare, r.GoodputRPS, r.GoodputGPU, 1000*r.TTFTP50S, 1000*r.TTFTP99S, r.HitRatio, r.Remote, r.USDPerMTok)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("simulate: write sweep table: %w", err)
	}
	if len(rows) > 0 && rows[0].Recommended {
		fmt.Fprintf(w, "\nrecommended (*): %s — the most goodput per GPU among configurations where at least %.0f%% of requests meet the SLO (%s)\n",
			rows[0].Label, 100*minGood, slo)
	} else {
		fmt.Fprintf(w, "\nno configuration met the SLO (%s) for %.0f%% of requests: add workers or relax --min-good\n", slo, 100*minGood)
	}
	return nil
}
