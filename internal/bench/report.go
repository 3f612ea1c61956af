package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes rep to path as indented JSON (docs/bench-schema.md).
func WriteJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: write --json: %w", err)
	}
	return nil
}

// WriteTable writes the human summary: the deployment shape, then the runs
// side by side, then (disagg) one row per prompt size.
func WriteTable(w io.Writer, rep *Report) error {
	fmt.Fprintf(w, "switchyard bench %s  %s  model %s  block %d tokens\n", rep.Scenario, rep.URL, rep.Model, rep.BlockSize)
	fmt.Fprintf(w, "deployment: status %s, %s\n", orDash(rep.Deployment.Status), workersLine(rep.Deployment.Workers))
	if rep.Settings.PrefixSizing != "" {
		fmt.Fprintf(w, "prefixes: %s\n", rep.Settings.PrefixSizing)
	}
	if rep.Settings.LoadEstimate != "" {
		fmt.Fprintf(w, "load: %s\n", rep.Settings.LoadEstimate)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, f func(a *Aggregate) string) {
		fmt.Fprintf(tw, "%s\t", name)
		for i := range rep.Runs {
			fmt.Fprintf(tw, "%s\t", f(&rep.Runs[i].Aggregate))
		}
		fmt.Fprintln(tw)
	}
	head := "policy"
	for _, r := range rep.Runs {
		if r.DisaggMode != "" {
			head = "run" // a policy and a disaggregation mode
		}
	}
	fmt.Fprint(tw, head+"\t")
	for _, r := range rep.Runs {
		fmt.Fprintf(tw, "%s\t", runLabel(r))
	}
	fmt.Fprintln(tw)
	row("requests", func(a *Aggregate) string { return fmt.Sprint(a.Requests) })
	row("ok", func(a *Aggregate) string { return fmt.Sprint(a.OK) })
	row("rejected (429/503)", func(a *Aggregate) string { return fmt.Sprint(a.Rejected) })
	row("errors", func(a *Aggregate) string { return fmt.Sprint(a.Errors) })
	row("duration s", func(a *Aggregate) string { return fmt.Sprintf("%.2f", a.DurationS) })
	row("requests/s", func(a *Aggregate) string { return fmt.Sprintf("%.2f", a.RequestsPerS) })
	row("output tokens/s", func(a *Aggregate) string { return fmt.Sprintf("%.1f", a.OutputTokensPerS) })
	row("TTFT p50/p90/p99 ms", func(a *Aggregate) string { return qms(a.TTFT) })
	row("ITL p50/p90/p99 ms", func(a *Aggregate) string { return qms(a.ITL) })
	row("E2E p50/p90/p99 ms", func(a *Aggregate) string { return qms(a.E2E) })
	row("cache hit ratio (tokens)", func(a *Aggregate) string { return fmt.Sprintf("%.3f", a.HitRatio) })
	if hasTiers(rep) {
		tier := func(f func(t *TierStats) string) func(a *Aggregate) string {
			return func(a *Aggregate) string {
				if a.Tiers == nil {
					return "-"
				}
				return f(a.Tiers)
			}
		}
		row("hit ratio GPU/CPU/disk", tier(func(t *TierStats) string {
			return fmt.Sprintf("%.3f/%.3f/%.3f", t.HitRatio.GPU, t.HitRatio.CPU, t.HitRatio.Disk)
		}))
		row("loaded GB CPU/disk", tier(func(t *TierStats) string {
			return fmt.Sprintf("%.2f/%.2f", t.LoadedBytes.CPU/1e9, t.LoadedBytes.Disk/1e9)
		}))
		for _, k := range []string{"miss", "gpu", "cpu", "disk"} {
			row("TTFT p50/p99 ms, hit "+k, tier(func(t *TierStats) string {
				q, ok := t.TTFTByHit[k]
				if !ok {
					return "-"
				}
				return fmt.Sprintf("%s/%s (n=%d)", ms(q.P50), ms(q.P99), t.Requests[k])
			}))
		}
	}
	row("cache hits (requests)", func(a *Aggregate) string {
		if a.HitEligible == 0 {
			return "-"
		}
		return fmt.Sprintf("%d/%d", a.Hits, a.HitEligible)
	})
	row("goodput req/s", func(a *Aggregate) string {
		return fmt.Sprintf("%.2f (%d/%d)", a.GoodputRPS, a.GoodRequests, a.Requests)
	})
	row("prefill local/remote", func(a *Aggregate) string {
		if a.PrefillLocal+a.PrefillRemote == 0 {
			return "-" // aggregated: the gate was never asked
		}
		return fmt.Sprintf("%d/%d", a.PrefillLocal, a.PrefillRemote)
	})
	row("KV transferred tokens", func(a *Aggregate) string {
		if a.PrefillRemote == 0 {
			return "-"
		}
		return fmt.Sprint(a.TransferredTokens)
	})
	row("workers used", func(a *Aggregate) string { return workersUsedLine(a.Workers) })
	row("error kinds", func(a *Aggregate) string { return countsLine(a.ErrorKinds) })
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("bench: write table: %w", err)
	}
	if a := rep.Runs; len(a) > 0 {
		fmt.Fprintf(w, "\nSLO for goodput: TTFT <= %gs and mean ITL <= %gs per request\n", a[0].Aggregate.TTFTSLOS, a[0].Aggregate.ITLSLOS)
	}
	for _, r := range rep.Runs {
		if err := writeErrorKinds(w, r); err != nil {
			return err
		}
	}
	for _, r := range rep.Runs {
		if len(r.Groups) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nby prompt size%s:\n", policySuffix(r))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "prompt tokens\tn\tok\tTTFT p50 ms\tTTFT p99 ms\tE2E p50 ms\tcached\tlocal/remote\ttransferred\tpredicted TTFT ms\treasons")
		for _, g := range r.Groups {
			a := &g.Aggregate
			pred := "-"
			if g.PredictedTTFTMsMean != nil {
				pred = fmt.Sprintf("%.1f", *g.PredictedTTFTMsMean)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%.3f\t%d/%d\t%d\t%s\t%s\n", g.Key, a.Requests, a.OK,
				ms(a.TTFT.P50), ms(a.TTFT.P99), ms(a.E2E.P50), a.HitRatio, a.PrefillLocal, a.PrefillRemote, a.TransferredTokens, pred, countsLine(g.DisaggReasons))
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("bench: write table: %w", err)
		}
	}
	return nil
}

// runLabel names a run by its policy and disaggregation mode.
func runLabel(r PolicyRun) string {
	switch {
	case r.Policy != "" && r.DisaggMode != "":
		return r.Policy + " disagg " + r.DisaggMode
	case r.DisaggMode != "":
		return "disagg " + r.DisaggMode
	case r.Policy != "":
		return r.Policy
	}
	return "(as deployed)"
}

func policySuffix(r PolicyRun) string {
	if r.Policy == "" && r.DisaggMode == "" {
		return ""
	}
	return " (" + runLabel(r) + ")"
}

func ms(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *v*1000)
}

func qms(q Quantiles) string { return ms(q.P50) + "/" + ms(q.P90) + "/" + ms(q.P99) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func countsLine(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", orDash(k), m[k])
	}
	return strings.Join(parts, " ")
}

func workersLine(ws []HealthWorker) string {
	if len(ws) == 0 {
		return "workers not reported"
	}
	if len(ws) > 12 {
		roles, states := map[string]int{}, map[string]int{}
		for _, w := range ws {
			roles[orDash(w.Role)]++
			states[orDash(w.Events.State)]++
		}
		return fmt.Sprintf("%d workers: roles %s; events %s", len(ws), countsLine(roles), countsLine(states))
	}
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = fmt.Sprintf("%s (%s, events %s)", w.ID, orDash(w.Role), orDash(w.Events.State))
	}
	return fmt.Sprintf("%d workers: %s", len(ws), strings.Join(parts, ", "))
}

// hasTiers reports whether any run's workers reported KV tiers.
func hasTiers(rep *Report) bool {
	for i := range rep.Runs {
		if rep.Runs[i].Aggregate.Tiers != nil {
			return true
		}
	}
	return false
}

// errorHints say what an error kind usually means and what to do.
var errorHints = map[string]string{
	"http_504":  "no answer in time: the deployment is overloaded (see load above) or --header-timeout is short; slow the replay (--time-scale), add workers, or raise the timeouts",
	"timeout":   "bench's own --timeout expired: the deployment is overloaded, or raise --timeout",
	"http_503":  "rejected: no worker could take it (none routable, or shedding at --max-inflight)",
	"http_429":  "rejected: the frontend is shedding load",
	"http_400":  "the request was refused as invalid, e.g. a prompt beyond max_model_len; see the example",
	"http_413":  "the body is over the frontend's --max-body-bytes",
	"http_502":  "a worker failed before answering; see the frontend's log",
	"transport": "the connection failed: is the frontend running at --url?",
	"truncated": "the stream broke off: a worker died mid-answer or --request-timeout cut it",
	"not_sent":  "the run was cancelled before these were sent",
}

// writeErrorKinds writes, for a run with errors, each kind's count, one
// example message and what it usually means.
func writeErrorKinds(w io.Writer, r PolicyRun) error {
	type kind struct {
		n       int
		example string
	}
	kinds := map[string]*kind{}
	var names []string
	for _, rec := range r.Records {
		if rec.Warmup || rec.Outcome == OutcomeOK || rec.ErrorKind == "" {
			continue
		}
		k := kinds[rec.ErrorKind]
		if k == nil {
			k = &kind{example: rec.ErrorMsg}
			kinds[rec.ErrorKind] = k
			names = append(names, rec.ErrorKind)
		}
		k.n++
	}
	if len(names) == 0 {
		return nil
	}
	sort.Slice(names, func(i, j int) bool {
		if a, b := kinds[names[i]].n, kinds[names[j]].n; a != b {
			return a > b
		}
		return names[i] < names[j]
	})
	fmt.Fprintf(w, "\nerrors by kind%s:\n", policySuffix(r))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  KIND\tCOUNT\tEXAMPLE\tWHAT IT USUALLY MEANS")
	for _, n := range names {
		ex := kinds[n].example
		if len(ex) > 100 {
			ex = ex[:97] + "..."
		}
		hint := errorHints[n]
		if hint == "" && strings.HasPrefix(n, "stream_") {
			hint = "the worker ended the stream with an error event"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", n, kinds[n].n, orDash(ex), orDash(hint))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("bench: write table: %w", err)
	}
	return nil
}

// workersUsedLine lists requests per worker, or for more than a dozen
// workers (a simulated cluster) their count and the spread.
func workersUsedLine(m map[string]int) string {
	if len(m) <= 12 {
		return countsLine(m)
	}
	lo, hi, sum := -1, 0, 0
	for _, n := range m {
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
		sum += n
	}
	return fmt.Sprintf("%d workers, %d-%d requests each (mean %.1f)", len(m), lo, hi, float64(sum)/float64(len(m)))
}
