package bench

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// compareReport builds a one-run trace report with the given headline
// figures and hits requests that found 32 tokens cached.
func compareReport(p50, p99, hit, goodput float64, local, remote, hits int) *Report {
	recs := make([]Record, 10)
	for i := range recs {
		recs[i].Outcome = OutcomeOK
		if i < hits {
			recs[i].CachedTokens = 32
		}
	}
	a := Aggregate{Requests: 10, OK: 10, TTFT: Quantiles{P50: &p50, P99: &p99}, HitRatio: hit, GoodputRPS: goodput,
		PrefillLocal: local, PrefillRemote: remote}
	return &Report{Schema: SchemaVersion, Scenario: ScenarioTrace, Model: "llama-3.1-8b", BlockSize: 16,
		Settings: Settings{Trace: "t.jsonl", TraceFormat: FormatMooncake, TimeScale: 1, Skip: 3000, MaxRequests: 400,
			TTFTSLOS: 2, ITLSLOS: 0.1},
		Deployment: Health{Workers: []HealthWorker{{ID: "worker-1", Role: "aggregated"}, {ID: "worker-2", Role: "aggregated"}}},
		Runs:       []PolicyRun{{Aggregate: a, Records: recs}}}
}

func TestCompare(t *testing.T) {
	live := compareReport(1.2, 4.0, 0.10, 2.0, 0, 0, 6)
	sims := []*Report{compareReport(0.9, 3.5, 0.20, 2.0, 0, 0, 4), compareReport(1.1, 4.5, 0.0, 2.0, 0, 0, 5)}
	c := Compare(live, sims, []int64{1, 2}, 0.15)
	want := []struct {
		metric         string
		live, sim      float64
		simMin, simMax float64
		diff           float64
		outside        bool
	}{
		{"TTFT p50 ms", 1200, 1000, 900, 1100, 0.2, true},
		{"TTFT p99 ms", 4000, 4000, 3500, 4500, 0, false},
		{"hit ratio", 0.10, 0.10, 0, 0.20, 0, false},
		{"goodput req/s", 2, 2, 2, 2, 0, false},
	}
	if len(c.Rows) != len(want) {
		t.Fatalf("%d rows, want %d (no prefill rows without disaggregation): %+v", len(c.Rows), len(want), c.Rows)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }
	for i, w := range want {
		r := c.Rows[i]
		if r.Metric != w.metric || !near(r.Live, w.live) || !near(r.Sim, w.sim) || !near(r.SimMin, w.simMin) ||
			!near(r.SimMax, w.simMax) || !near(r.Diff, w.diff) || r.Outside != w.outside {
			t.Errorf("row %d = %+v, want %+v", i, r, w)
		}
	}
	if c.LiveHitRequests != 6 || c.SimHitRequests != 4.5 || c.Outside() != 1 {
		t.Errorf("hit requests live %d sim %g, outside %d; want 6, 4.5, 1", c.LiveHitRequests, c.SimHitRequests, c.Outside())
	}
	var b bytes.Buffer
	if err := WriteComparison(&b, c); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"tolerance ±15%", "mean of 2 seeds", "* +20.0%", "900–1100", "1 of 4 metrics differ by more than 15%",
		"made by 6 live and 4.5 simulated requests"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, b.String())
		}
	}

	// Disaggregated: the local/remote split is compared; a simulated 0
	// against a live count is infinitely far off, and a missing TTFT is
	// outside whatever the tolerance.
	live = compareReport(1.0, 4.0, 0.1, 2.0, 8, 2, 1)
	live.Runs[0].Aggregate.TTFT.P99 = nil
	c = Compare(live, []*Report{compareReport(1.0, 4.0, 0.1, 2.0, 10, 0, 1)}, []int64{1}, 0.5)
	if len(c.Rows) != 6 || c.Rows[4].Metric != "prefill local" || c.Rows[5].Metric != "prefill remote" {
		t.Fatalf("rows %+v: want prefill local and remote last", c.Rows)
	}
	if r := c.Rows[5]; !math.IsInf(r.Diff, 1) || !r.Outside {
		t.Errorf("prefill remote live 2 vs sim 0: %+v, want +Inf and outside", r)
	}
	if r := c.Rows[4]; !near(r.Diff, -0.2) || r.Outside {
		t.Errorf("prefill local live 8 vs sim 10: %+v, want -20%% inside 50%%", r)
	}
	if r := c.Rows[1]; !math.IsNaN(r.Diff) || !r.Outside {
		t.Errorf("TTFT p99 missing live: %+v, want NaN and outside", r)
	}
}

func TestComparable(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.jsonl")
	if err := os.WriteFile(trace, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sim := func() *Report {
		r := compareReport(1, 1, 0, 1, 0, 0, 0)
		r.Settings.Trace = trace
		r.Simulation = &Simulation{Router: "kv"}
		return r
	}
	tests := []struct {
		name   string
		change func(live *Report)
		want   string // "" = comparable
	}{
		{"same", func(*Report) {}, ""},
		{"same trace by another path", func(l *Report) { l.Settings.Trace = dir + "/./t.jsonl" }, ""},
		{"same trace from another host", func(l *Report) { l.Settings.Trace = "/elsewhere/t.jsonl" }, ""},
		{"same router", func(l *Report) { l.Deployment.Policy = "kv" }, ""},
		{"other trace", func(l *Report) { l.Settings.Trace = "/elsewhere/u.jsonl" }, "trace: live /elsewhere/u.jsonl"},
		{"skip", func(l *Report) { l.Settings.Skip = 0 }, "--skip: live 0, simulation 3000"},
		{"max requests", func(l *Report) { l.Settings.MaxRequests = 1000 }, "--max-requests: live 1000, simulation 400"},
		{"time scale", func(l *Report) { l.Settings.TimeScale = 2 }, "--time-scale: live 2, simulation 1"},
		{"ttft slo", func(l *Report) { l.Settings.TTFTSLOS = 1 }, "--ttft-slo (s): live 1, simulation 2"},
		{"itl slo", func(l *Report) { l.Settings.ITLSLOS = 0.05 }, "--itl-slo (s): live 0.05, simulation 0.1"},
		{"format", func(l *Report) { l.Settings.TraceFormat = FormatAzure }, "trace format"},
		{"long share", func(l *Report) { l.Settings.LongShare = 0.1 }, "--long-share"},
		{"model", func(l *Report) { l.Model = "qwen3-0.6b" }, "model: live qwen3-0.6b, simulation llama-3.1-8b"},
		{"workers", func(l *Report) { l.Deployment.Workers = l.Deployment.Workers[:1] }, "workers: live aggregated:1, simulation aggregated:2"},
		{"router", func(l *Report) { l.Deployment.Policy = "round-robin" }, "router: live round-robin, simulation kv"},
		{"not a trace", func(l *Report) { l.Scenario = ScenarioRouting }, "bench routing run"},
		{"two runs", func(l *Report) { l.Runs = append(l.Runs, l.Runs[0]) }, "2 runs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			live := sim()
			tt.change(live)
			err := Comparable(live, sim())
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("err = %v, want comparable", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("err = %v, want one naming %q", err, tt.want)
			}
		})
	}
}

func TestReadReport(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r.json")
	rep := compareReport(1, 2, 0.5, 1, 0, 0, 3)
	if err := WriteJSON(p, rep); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReport(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.Settings.Skip != 3000 || *got.Runs[0].Aggregate.TTFT.P99 != 2 || hitRequests(got) != 3 {
		t.Errorf("round trip: settings %+v, hit requests %d", got.Settings, hitRequests(got))
	}
	other := filepath.Join(dir, "o.json")
	if err := os.WriteFile(other, []byte(`{"schema":"switchyard-preflight/v1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadReport(other); err == nil || !strings.Contains(err.Error(), `schema "switchyard-preflight/v1"`) {
		t.Errorf("other schema: err = %v", err)
	}
}
