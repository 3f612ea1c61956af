package simulate

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/bench"
	"github.com/switchyard-llm/switchyard/internal/gate"
	"github.com/switchyard-llm/switchyard/internal/linkemu"
)

const mooncakePath = "../../../shared/data/traces/mooncake_synthetic_trace.jsonl"

// traceItems reads the first n requests of the Mooncake trace.
func traceItems(t testing.TB, n int, timeScale float64) []bench.Item {
	t.Helper()
	reqs, err := bench.ReadTrace(mooncakePath, bench.FormatMooncake)
	if err != nil {
		t.Fatal(err)
	}
	return bench.TraceItems(reqs[:n], timeScale)
}

func smallConfig(t testing.TB, n int) Config {
	t.Helper()
	c := DefaultConfig()
	c.Items = traceItems(t, n, 1)
	c.Engine.Model, c.Engine.GPU = "llama-3.1-8b", "h100"
	return c
}

func run(t testing.TB, c Config) *bench.Report {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func encode(t testing.TB, rep *bench.Report) []byte {
	t.Helper()
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDeterministic(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"kv", func(c *Config) {}},
		{"random", func(c *Config) { c.Router = "random" }},
		{"disagg", func(c *Config) { c.Workers, c.PrefillWorkers, c.LinkRate = 2, 1, linkemu.Rate(1.25e9) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := smallConfig(t, 120)
			tc.mod(&c)
			a, b := encode(t, run(t, c)), encode(t, run(t, c))
			if !bytes.Equal(a, b) {
				t.Errorf("two runs with seed %d gave different JSON (%d and %d bytes)", c.Seed, len(a), len(b))
			}
			c.Seed = 2
			if d := encode(t, run(t, c)); bytes.Equal(a, d) && tc.name == "random" {
				t.Errorf("seed 2 gave the same JSON as seed 1: the seed is not used")
			}
		})
	}
}

// Every request finishes or is counted as failed, on a cluster small
// enough that the trace overloads it and its longest prompts do not fit.
func TestConservation(t *testing.T) {
	c := smallConfig(t, 300)
	c.Engine.Model, c.Engine.GPU = "qwen3-0.6b", "rtx-4060"
	c.Engine.KVBlocks = 2000 // 32k tokens: the trace's longer prompts can never fit
	c.Workers, c.PrefillWorkers, c.LinkRate = 2, 1, linkemu.Rate(125e6)
	rep := run(t, c)
	a := rep.Runs[0].Aggregate
	if a.Requests != 300 || a.OK+a.Rejected+a.Errors != a.Requests {
		t.Fatalf("requests %d = ok %d + rejected %d + errors %d? want 300 in all", a.Requests, a.OK, a.Rejected, a.Errors)
	}
	if a.Errors == 0 || a.OK == 0 {
		t.Errorf("ok %d errors %d: want both (the cache holds 32k tokens; some prompts are longer)", a.OK, a.Errors)
	}
	for k := range a.ErrorKinds {
		if k != "http_400" {
			t.Errorf("error kind %q: only requests longer than the cache should fail", k)
		}
	}
	var out int
	for _, r := range rep.Runs[0].Records {
		if r.Outcome == bench.OutcomeOK {
			if r.CompletionTokens != r.MaxTokens || r.TTFTS <= 0 || r.E2ES < r.TTFTS {
				t.Fatalf("record %d: %d of %d tokens, TTFT %v E2E %v", r.Index, r.CompletionTokens, r.MaxTokens, r.TTFTS, r.E2ES)
			}
			out += r.CompletionTokens
		}
	}
	if a.PrefillRemote == 0 {
		t.Errorf("no remote prefill with a prefill worker on 1 Gbit/s in auto mode")
	}
}

// The simulation reuses the production router: kv must beat round-robin
// on hit ratio and TTFT on the Mooncake trace, as it does live.
func TestKVBeatsRoundRobin(t *testing.T) {
	c := smallConfig(t, 600)
	kv := run(t, c).Runs[0].Aggregate
	c.Router = "round-robin"
	rr := run(t, c).Runs[0].Aggregate
	if kv.HitRatio <= rr.HitRatio || *kv.TTFTP50S >= *rr.TTFTP50S {
		t.Errorf("kv hit %.3f TTFT p50 %.3f s; round-robin %.3f %.3f s: want kv ahead on both", kv.HitRatio, *kv.TTFTP50S, rr.HitRatio, *rr.TTFTP50S)
	}
}

// On a slow link disaggregation costs TTFT; on a fast one auto uses it.
func TestDisaggFollowsLink(t *testing.T) {
	c := smallConfig(t, 150)
	c.Workers, c.PrefillWorkers = 2, 1
	c.Disagg = "always"
	c.LinkRate = linkemu.Rate(125e6) // 1 Gbit/s
	slow := run(t, c).Runs[0].Aggregate
	c.LinkRate = linkemu.Rate(50e9) // 400 Gbit/s
	fast := run(t, c).Runs[0].Aggregate
	if *slow.TTFTP50S <= 2**fast.TTFTP50S {
		t.Errorf("always-disaggregated TTFT p50 %.3f s on 1 Gbit/s vs %.3f s on 400 Gbit/s: the link does not show", *slow.TTFTP50S, *fast.TTFTP50S)
	}
	c.Disagg, c.LinkRate = "auto", linkemu.Rate(125e6)
	auto := run(t, c).Runs[0].Aggregate
	if *auto.TTFTP50S >= *slow.TTFTP50S || auto.PrefillLocal == 0 {
		t.Errorf("auto on 1 Gbit/s: TTFT p50 %.3f s with %d local prefills; always: %.3f s: the gate should keep prefills local and win",
			*auto.TTFTP50S, auto.PrefillLocal, *slow.TTFTP50S)
	}
}

func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"zero workers", func(c *Config) { c.Workers = 0 }, "--workers 0"},
		{"model larger than gpu", func(c *Config) { c.Engine.Model, c.Engine.GPU = "llama-3.1-70b", "rtx-4060" }, "does not fit"},
		{"model larger than gpu at tp 1", func(c *Config) { c.Engine.Model, c.Engine.GPU, c.Engine.TP = "llama-3.1-70b", "h100", 1 }, "no memory for the KV cache"},
		{"unknown gpu", func(c *Config) { c.Engine.GPU = "tpu" }, "unknown gpu"},
		{"unknown router", func(c *Config) { c.Router = "smart" }, "--router"},
		{"prefill without link", func(c *Config) { c.PrefillWorkers = 1 }, "--link-rate"},
		{"bad disagg", func(c *Config) { c.Disagg = "sometimes" }, "--disagg"},
		{"no requests", func(c *Config) { c.Items = nil }, "no requests"},
		{"negative threads", func(c *Config) { c.Threads = -1 }, "--threads -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := smallConfig(t, 5)
			tc.mod(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestSweepRanking(t *testing.T) {
	c := smallConfig(t, 300)
	dims := []Dim{{Key: "workers", Values: []string{"1", "4", "16"}}, {Key: "router", Values: []string{"kv", "round-robin"}}}
	rows, reps, err := Sweep(context.Background(), c, dims, 0.8, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 || len(reps) != 6 {
		t.Fatalf("%d rows, %d reports: want 6", len(rows), len(reps))
	}
	for i := 1; i < len(rows); i++ {
		a, b := rows[i-1], rows[i]
		if a.Meets == b.Meets && a.GoodputGPU < b.GoodputGPU {
			t.Errorf("row %d (%s, %.4f/GPU) ranked above row %d (%s, %.4f/GPU)", i, a.Label, a.GoodputGPU, i+1, b.Label, b.GoodputGPU)
		}
		if !a.Meets && b.Meets {
			t.Errorf("row %s misses the SLO share but ranks above %s, which meets it", a.Label, b.Label)
		}
	}
	if !rows[0].Recommended {
		t.Fatalf("no recommendation: %+v", rows)
	}
	for _, r := range rows[1:] {
		if r.Recommended {
			t.Errorf("%s also recommended", r.Label)
		}
	}
	// One worker cannot serve this slice within the SLO.
	if strings.Contains(rows[0].Label, "workers=1 ") {
		t.Errorf("recommended %s", rows[0].Label)
	}
	var buf bytes.Buffer
	if err := WriteSweepTable(&buf, rows, 0.8, "TTFT <= 2s"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "1 *") || !strings.Contains(buf.String(), "recommended (*): "+rows[0].Label) {
		t.Errorf("table does not mark the recommendation first:\n%s", buf.String())
	}
}

func TestRankOrdersByGoodputPerGPU(t *testing.T) {
	rows := []Row{
		{Label: "a", GoodputGPU: 1, GPUs: 4, Meets: false},
		{Label: "b", GoodputGPU: 0.5, GPUs: 8, Meets: true},
		{Label: "c", GoodputGPU: 0.7, GPUs: 4, Meets: true},
		{Label: "d", GoodputGPU: 0.7, GPUs: 2, Meets: true},
	}
	Rank(rows)
	var got []string
	for _, r := range rows {
		got = append(got, r.Label)
	}
	if strings.Join(got, "") != "dcba" || !rows[0].Recommended || rows[1].Recommended {
		t.Errorf("ranked %v (first recommended %v), want d c b a with d recommended", got, rows[0].Recommended)
	}
}

// TestRankBreaksTiesOnTTFT: equal goodput on equal GPUs goes to the lower
// TTFT (disagg=always once ranked first on a tie by its name alone).
func TestRankBreaksTiesOnTTFT(t *testing.T) {
	rows := []Row{
		{Label: "disagg=always", GoodputGPU: 0.5, GPUs: 3, Meets: true, TTFTP50S: 2.8, TTFTP99S: 45},
		{Label: "disagg=auto", GoodputGPU: 0.5, GPUs: 3, Meets: true, TTFTP50S: 0.023, TTFTP99S: 0.333},
		{Label: "disagg=never", GoodputGPU: 0.5, GPUs: 3, Meets: true, TTFTP50S: 0.023, TTFTP99S: 0.340},
	}
	Rank(rows)
	if rows[0].Label != "disagg=auto" || rows[1].Label != "disagg=never" || rows[2].Label != "disagg=always" {
		t.Errorf("ranked %s, %s, %s; want auto, never, always (TTFT p50, then p99)", rows[0].Label, rows[1].Label, rows[2].Label)
	}
}

func TestParseDim(t *testing.T) {
	if d, err := ParseDim("workers=4, 8,16"); err != nil || strings.Join(d.Values, "|") != "4|8|16" {
		t.Errorf("ParseDim = %+v, %v", d, err)
	}
	for _, bad := range []string{"workers", "gpus=1", "router="} {
		if _, err := ParseDim(bad); err == nil {
			t.Errorf("ParseDim(%q) accepted", bad)
		}
	}
	if len(Points([]Dim{{"a", []string{"1", "2"}}, {"b", []string{"x", "y", "z"}}})) != 6 {
		t.Errorf("cross product of 2 × 3 is not 6 points")
	}
}

// TestTierPricedBeatsTierBlind: with a host-memory tier on every worker,
// pricing lower-tier hits (the default) reuses more of the trace than a
// router that counts them as misses, and the report splits hits by tier.
func TestTierPricedBeatsTierBlind(t *testing.T) {
	c := smallConfig(t, 600)
	c.Engine.KVOffloadGiB = 256
	priced := run(t, c).Runs[0].Aggregate
	c.TierBlind = true
	blind := run(t, c).Runs[0].Aggregate
	if priced.Tiers == nil || blind.Tiers == nil {
		t.Fatalf("no tier split: priced %+v, blind %+v", priced.Tiers, blind.Tiers)
	}
	if priced.HitRatio <= blind.HitRatio || priced.Tiers.HitRatio.CPU <= blind.Tiers.HitRatio.CPU || priced.Tiers.LoadedBytes.CPU == 0 {
		t.Errorf("priced hit %.3f (cpu %.3f), blind %.3f (cpu %.3f): want priced ahead, with bytes loaded",
			priced.HitRatio, priced.Tiers.HitRatio.CPU, blind.HitRatio, blind.Tiers.HitRatio.CPU)
	}
}

// A prefill worker finishing two prompts in one step, the first of whose
// KV its decode worker already holds (a transfer of nothing, done at once),
// delivered the second twice: finishing the empty transfer started the
// prefill worker's next step while its deliveries were being walked, and
// that step's deliveries overwrote them (a panic on the recycled buffer).
// Under `always` every prefill goes remote, so prompts the decode worker
// already holds cross the link: requests 250-309 of the Mooncake trace hit
// it on 1, 10 and 100 Gbit/s with the fix reverted (and 2500-2899 did under
// `auto` before the gate kept such prompts local).
func TestPrefillDeliveredOnce(t *testing.T) {
	reqs, err := bench.ReadTraceSlice(mooncakePath, bench.FormatMooncake, 250, 60)
	if err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.Items = bench.TraceItems(reqs, 1)
	c.Engine.Model, c.Engine.GPU = "llama-3.1-8b", "h100"
	c.Workers, c.PrefillWorkers, c.LinkRate = 2, 1, linkemu.Rate(125e6)
	c.Disagg = gate.ModeAlways
	rep := run(t, c)
	a := rep.Runs[0].Aggregate
	if a.Requests != 60 || a.OK+a.Rejected+a.Errors != a.Requests || a.PrefillRemote == 0 {
		t.Fatalf("requests %d = ok %d + rejected %d + errors %d, %d remote: want 60 in all and some remote", a.Requests, a.OK, a.Rejected, a.Errors, a.PrefillRemote)
	}
}
