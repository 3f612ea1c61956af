package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// ReadReport reads a JSON report that WriteJSON wrote (bench --json or
// simulate --json).
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bench: read report: %w", err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("bench: report %s: %w", path, err)
	}
	if rep.Schema != SchemaVersion {
		return nil, fmt.Errorf("bench: report %s: schema %q, want %q (a --json file of bench or simulate)", path, rep.Schema, SchemaVersion)
	}
	return &rep, nil
}

// Comparable returns nil when live and sim replayed the same trace slice
// under the same SLOs on a cluster of the same shape, else an error naming
// every difference: a comparison of different workloads would measure the
// difference, not the simulation's error. Facts one report does not carry
// (the router of a deployment that did not report it, the workers' KV
// blocks) are not compared.
func Comparable(live, sim *Report) error {
	var errs []error
	differ := func(what string, l, s any) {
		errs = append(errs, fmt.Errorf("%s: live %v, simulation %v", what, l, s))
	}
	if live.Scenario != ScenarioTrace {
		errs = append(errs, fmt.Errorf("live report is a bench %s run; compare a bench trace --json report", live.Scenario))
	}
	if len(live.Runs) != 1 {
		errs = append(errs, fmt.Errorf("live report has %d runs (--compare-policies or --compare-disagg?); compare a run of one configuration", len(live.Runs)))
	}
	ls, ss := live.Settings, sim.Settings
	if !sameTrace(ls.Trace, ss.Trace) {
		differ("trace", ls.Trace, ss.Trace)
	}
	if ls.TraceFormat != ss.TraceFormat {
		differ("trace format", ls.TraceFormat, ss.TraceFormat)
	}
	if ls.Skip != ss.Skip {
		differ("--skip", ls.Skip, ss.Skip)
	}
	if ls.MaxRequests != ss.MaxRequests {
		differ("--max-requests", ls.MaxRequests, ss.MaxRequests)
	}
	if ls.TimeScale != ss.TimeScale {
		differ("--time-scale", ls.TimeScale, ss.TimeScale)
	}
	if ls.TTFTSLOS != ss.TTFTSLOS {
		differ("--ttft-slo (s)", ls.TTFTSLOS, ss.TTFTSLOS)
	}
	if ls.ITLSLOS != ss.ITLSLOS {
		differ("--itl-slo (s)", ls.ITLSLOS, ss.ITLSLOS)
	}
	if ls.LongShare != ss.LongShare || (ls.LongShare > 0 && (ls.LongTokens != ss.LongTokens || ls.Seed != ss.Seed)) {
		differ("--long-share/--long-tokens/--seed", fmt.Sprintf("%g/%d/%d", ls.LongShare, ls.LongTokens, ls.Seed),
			fmt.Sprintf("%g/%d/%d", ss.LongShare, ss.LongTokens, ss.Seed))
	}
	if live.Model != "" && live.Model != sim.Model {
		differ("model", live.Model, sim.Model)
	}
	if l, s := roleCounts(live.Deployment.Workers), roleCounts(sim.Deployment.Workers); l != "" && l != s {
		differ("workers", l, s)
	}
	if p := live.Deployment.Policy; p != "" && sim.Simulation != nil && p != sim.Simulation.Router {
		differ("router", p, sim.Simulation.Router)
	}
	if len(errs) > 0 {
		return fmt.Errorf("bench: the live report ran a different workload or cluster:\n%w", errors.Join(errs...))
	}
	return nil
}

// sameTrace reports whether two reports' trace paths name the same file:
// the same path, the same file on this host, or (for a live report made
// on another host, whose path does not exist here) the same base name.
func sameTrace(live, sim string) bool {
	if filepath.Clean(live) == filepath.Clean(sim) {
		return true
	}
	li, lerr := os.Stat(live)
	si, serr := os.Stat(sim)
	if lerr == nil && serr == nil {
		return os.SameFile(li, si)
	}
	return lerr != nil && filepath.Base(live) == filepath.Base(sim)
}

// roleCounts summarises workers by role, e.g. "2 decode, 1 prefill"; ""
// when the report lists none.
func roleCounts(ws []HealthWorker) string {
	if len(ws) == 0 {
		return ""
	}
	n := map[string]int{}
	for _, w := range ws {
		n[orDash(w.Role)]++
	}
	return countsLine(n)
}

// Comparison is a live run against one or more simulations of it.
type Comparison struct {
	Tolerance float64 // relative: 0.15 marks cells more than 15% apart
	Seeds     []int64 // the simulations' seeds
	Rows      []ComparisonRow
	// Hit requests: successful requests that found at least one block
	// cached, live and the simulations' mean; the hit ratio's footing.
	LiveHitRequests int
	SimHitRequests  float64
	LiveRequests    int
	LiveFailed      int // live requests that did not succeed
}

// ComparisonRow is one metric: live, the simulations' mean and range, and
// live's relative distance from the mean.
type ComparisonRow struct {
	Metric         string
	Live           float64 // NaN: live has no value (no successful request)
	Sim            float64 // mean over the simulations; NaN as Live
	SimMin, SimMax float64
	Diff           float64 // (live − sim) / sim; ±Inf when sim is 0 and live is not, NaN when either is missing
	Outside        bool    // |Diff| > Tolerance, or a side is missing
	format         string
}

// Compare sets live against sims (one per seed; the first seed's report
// first), metric by metric: TTFT p50 and p99, hit ratio, goodput and, when
// either side disaggregated, the prefill local/remote split.
func Compare(live *Report, sims []*Report, seeds []int64, tol float64) Comparison {
	c := Comparison{Tolerance: tol, Seeds: seeds}
	la := &live.Runs[0].Aggregate
	c.LiveRequests, c.LiveFailed = la.Requests, la.Requests-la.OK
	c.LiveHitRequests = hitRequests(live)
	for _, s := range sims {
		c.SimHitRequests += float64(hitRequests(s)) / float64(len(sims))
	}
	add := func(metric, format string, f func(a *Aggregate) float64) {
		r := ComparisonRow{Metric: metric, Live: f(la), SimMin: math.Inf(1), SimMax: math.Inf(-1), format: format}
		for _, s := range sims {
			v := f(&s.Runs[0].Aggregate)
			r.Sim += v / float64(len(sims))
			r.SimMin, r.SimMax = min(r.SimMin, v), max(r.SimMax, v)
		}
		switch {
		case math.IsNaN(r.Live) || math.IsNaN(r.Sim):
			r.Diff = math.NaN()
		case r.Sim == 0 && r.Live == 0:
			r.Diff = 0
		default:
			r.Diff = (r.Live - r.Sim) / r.Sim // ±Inf when sim is 0
		}
		r.Outside = !(math.Abs(r.Diff) <= tol)
		c.Rows = append(c.Rows, r)
	}
	ms := func(q *float64) float64 {
		if q == nil {
			return math.NaN()
		}
		return *q * 1000
	}
	add("TTFT p50 ms", "%.0f", func(a *Aggregate) float64 { return ms(a.TTFT.P50) })
	add("TTFT p99 ms", "%.0f", func(a *Aggregate) float64 { return ms(a.TTFT.P99) })
	add("hit ratio", "%.3f", func(a *Aggregate) float64 { return a.HitRatio })
	add("goodput req/s", "%.2f", func(a *Aggregate) float64 { return a.GoodputRPS })
	disagg := la.PrefillRemote > 0
	for _, s := range sims {
		disagg = disagg || s.Runs[0].Aggregate.PrefillRemote > 0 || (s.Simulation != nil && s.Simulation.PrefillWorkers > 0)
	}
	if disagg {
		add("prefill local", "%.0f", func(a *Aggregate) float64 { return float64(a.PrefillLocal) })
		add("prefill remote", "%.0f", func(a *Aggregate) float64 { return float64(a.PrefillRemote) })
	}
	return c
}

// hitRequests counts rep's successful requests that found at least one
// block cached.
func hitRequests(rep *Report) int {
	bs := max(rep.BlockSize, 1)
	n := 0
	for _, r := range rep.Runs[0].Records {
		if !r.Warmup && r.Outcome == OutcomeOK && r.CachedTokens >= bs {
			n++
		}
	}
	return n
}

// Outside counts the metrics outside the tolerance.
func (c Comparison) Outside() int {
	n := 0
	for _, r := range c.Rows {
		if r.Outside {
			n++
		}
	}
	return n
}

// WriteComparison writes c as a table, live against simulated, with the
// cells outside the tolerance marked.
func WriteComparison(w io.Writer, c Comparison) error {
	sim := fmt.Sprintf("simulated (seed %d)", c.Seeds[0])
	if len(c.Seeds) > 1 {
		sim = fmt.Sprintf("simulated (mean of %d seeds)", len(c.Seeds))
	}
	fmt.Fprintf(w, "\nlive vs simulated, tolerance ±%g%%:\n", 100*c.Tolerance)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "metric\tlive\t%s\t", sim)
	if len(c.Seeds) > 1 {
		fmt.Fprint(tw, "simulated range\t")
	}
	fmt.Fprintln(tw, "live vs simulated\t")
	val := func(format string, v float64) string {
		if math.IsNaN(v) {
			return "-"
		}
		return fmt.Sprintf(format, v)
	}
	for _, r := range c.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t", r.Metric, val(r.format, r.Live), val(r.format, r.Sim))
		if len(c.Seeds) > 1 {
			fmt.Fprintf(tw, "%s–%s\t", val(r.format, r.SimMin), val(r.format, r.SimMax))
		}
		d := "-"
		if !math.IsNaN(r.Diff) {
			d = fmt.Sprintf("%+.1f%%", 100*r.Diff)
		}
		if r.Outside {
			d = "* " + d
		}
		fmt.Fprintf(tw, "%s\t\n", d)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("bench: write comparison: %w", err)
	}
	var notes []string
	if n := c.Outside(); n > 0 {
		notes = append(notes, fmt.Sprintf("* %d of %d metrics differ by more than %g%% from the simulation", n, len(c.Rows), 100*c.Tolerance))
	} else {
		notes = append(notes, fmt.Sprintf("every metric within %g%% of the simulation", 100*c.Tolerance))
	}
	if len(c.Seeds) > 1 {
		notes = append(notes, fmt.Sprintf("simulated: mean of seeds %s", seedList(c.Seeds)))
	}
	notes = append(notes, fmt.Sprintf("hit ratio made by %d live and %.1f simulated requests that found a prefix cached, of %d",
		c.LiveHitRequests, c.SimHitRequests, c.LiveRequests))
	if c.LiveFailed > 0 {
		notes = append(notes, fmt.Sprintf("%d live requests failed (see the live report's error kinds)", c.LiveFailed))
	}
	_, err := fmt.Fprintln(w, strings.Join(notes, "\n"))
	return err
}

func seedList(seeds []int64) string {
	parts := make([]string, len(seeds))
	for i, s := range seeds {
		parts[i] = fmt.Sprint(s)
	}
	return strings.Join(parts, ",")
}
