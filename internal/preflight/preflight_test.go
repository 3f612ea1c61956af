package preflight

import (
	"bytes"
	"context"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/engine/sim"
	"github.com/switchyard-llm/switchyard/internal/preflight/preflighttest"
)

// testConfig keeps the probes small so each run takes well under a second
// against the fake (its simulated prefill is 200µs per uncached token).
func testConfig(url string) Config {
	cfg := DefaultConfig()
	cfg.URL = url
	cfg.Timeout = 10 * time.Second
	cfg.ProbeTokens = 500
	cfg.RoutingPrefixTokens = 200
	cfg.Seed = 42
	return cfg
}

func run(t *testing.T, cfg Config) (*Report, string) {
	t.Helper()
	var progress bytes.Buffer
	rep, err := Run(context.Background(), cfg, &progress)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	if got := strings.Count(progress.String(), "preflight: ["); got != 8 {
		t.Errorf("progress lines = %d, want one per check (8):\n%s", got, progress.String())
	}
	var out bytes.Buffer
	if err := WriteTable(&out, rep); err != nil {
		t.Fatal(err)
	}
	return rep, out.String()
}

func check(t *testing.T, rep *Report, name string) *Check {
	t.Helper()
	for i := range rep.Checks {
		if rep.Checks[i].Name == name {
			return &rep.Checks[i]
		}
	}
	t.Fatalf("report has no check %q", name)
	return nil
}

func twoWorkers() []preflighttest.Worker {
	return []preflighttest.Worker{{ID: "w1"}, {ID: "w2"}}
}

func TestHealthyDeploymentPasses(t *testing.T) {
	f := preflighttest.New(t, preflighttest.Config{Workers: twoWorkers()})
	rep, out := run(t, testConfig(f.URL))
	if rep.Verdict != Pass || rep.Failed() {
		t.Fatalf("verdict %s, want PASS\n%s", rep.Verdict, out)
	}
	for _, c := range rep.Checks {
		// Without prefill workers there are no links and no disaggregation
		// math: SKIP, not a PASS that claims they were checked.
		want := Pass
		if c.Name == CheckLinks || c.Name == CheckDisagg {
			want = Skip
		}
		if c.Status != want {
			t.Errorf("%s: %s %v; want %s", c.Name, c.Status, c.Problems, want)
		}
	}
	if v := verdictLine(rep); !strings.Contains(v, "2 skipped") {
		t.Errorf("verdict line %q does not say two checks were skipped", v)
	}
	for _, p := range check(t, rep, CheckEvents).Events {
		if p.IndexedAfterS == nil || p.IndexedBlocks != p.ProbeBlocks || p.ServedBy != p.Worker {
			t.Errorf("events probe %+v: want indexed, all blocks, served by the pinned worker", p)
		}
	}
	for _, p := range check(t, rep, CheckPrefix).Prefix {
		if p.FullBlockTokens != 496 || p.WarmCached < 496 || p.ColdCached != 0 || !(p.WarmTTFTS < p.ColdTTFTS) {
			t.Errorf("prefix probe %+v", p)
		}
	}
	r := check(t, rep, CheckRouting).Routing
	if r.Hits != 12 || r.HitRatio != 1 || r.Policy != "kv" || r.IndexedPrefixes != 3 || r.SharedBlockTokens != 192 {
		t.Errorf("routing %+v", r)
	}
	if got := f.Pinned(); got != 2+2*(1+warmRepeats)+2*(1+agreementRequests) {
		t.Errorf("pinned requests = %d, want 2 event probes + 2×(cold + %d warm) prefix probes + 2×(cold + %d) agreement chats", got, warmRepeats, agreementRequests)
	}
	if !strings.Contains(check(t, rep, CheckLinks).Summary, "no disaggregation configured") {
		t.Errorf("links summary %q", check(t, rep, CheckLinks).Summary)
	}
	if d := check(t, rep, CheckDisagg).Disagg; d.Recommended != DisaggNever {
		t.Errorf("recommended %q without prefill workers", d.Recommended)
	}
	for _, want := range []string{"verdict: PASS", "kv-events", "Same-prefix probe", "w1", "w2"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestEventFailuresNameTheWorker(t *testing.T) {
	tests := []struct {
		name   string
		w2     preflighttest.Worker
		want   string
		health Status // the inventory sees /health degrade
	}{
		{"disabled", preflighttest.Worker{ID: "w2", Events: "disabled"}, "w2: KV events disabled (worker started with --kv-events=false)", Warn},
		{"silent", preflighttest.Worker{ID: "w2", Events: "silent"}, "w2: KV events silent", Warn},
		{"gaps", preflighttest.Worker{ID: "w2", GapPerRequest: 1}, "w2: 1 sequence gaps during the check", Pass},
		{"late", preflighttest.Worker{ID: "w2", EventDelay: time.Hour}, "w2: probe's 4 blocks not in the index after 0.5s", Pass},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // the fake's waits are sleeps, not CPU
			f := preflighttest.New(t, preflighttest.Config{Workers: []preflighttest.Worker{{ID: "w1"}, tt.w2}})
			cfg := testConfig(f.URL)
			cfg.EventsDeadline = 500 * time.Millisecond
			rep, out := run(t, cfg)
			if !rep.Failed() {
				t.Fatalf("verdict %s, want FAIL\n%s", rep.Verdict, out)
			}
			ev := check(t, rep, CheckEvents)
			if ev.Status != Fail || len(ev.Problems) != 1 || !strings.Contains(ev.Problems[0], tt.want) {
				t.Errorf("kv-events %s %q, want one problem containing %q", ev.Status, ev.Problems, tt.want)
			}
			if ev.Events[0].Status != Pass || ev.Events[1].Status != Fail {
				t.Errorf("per-worker status %s/%s, want PASS/FAIL", ev.Events[0].Status, ev.Events[1].Status)
			}
			if !strings.Contains(out, tt.want) || !strings.Contains(out, "verdict: FAIL — failed: kv-events") {
				t.Errorf("table does not name the worker:\n%s", out)
			}
			if got := check(t, rep, CheckInventory).Status; got != tt.health {
				t.Errorf("inventory %s, want %s", got, tt.health)
			}
		})
	}
}

// TestEventsPollsUntilIndexed checks the 2 s default deadline is a deadline,
// not a fixed wait: blocks that appear after 300 ms pass, and the report
// says when they appeared.
func TestEventsPollsUntilIndexed(t *testing.T) {
	f := preflighttest.New(t, preflighttest.Config{Workers: []preflighttest.Worker{{ID: "w1", EventDelay: 300 * time.Millisecond}}})
	rep, out := run(t, testConfig(f.URL))
	p := check(t, rep, CheckEvents).Events[0]
	if p.Status != Pass || p.IndexedAfterS == nil {
		t.Fatalf("events probe %+v\n%s", p, out)
	}
	// The response ends after the fake stamped the blocks visible 300 ms
	// later, so the poll sees them after at most 300 ms (plus a poll
	// interval). The floor is looser than "a poll interval short of 300 ms":
	// the clock starts when preflight has read the response, and on a
	// loaded 2-core CI box that can lag the fake's stamp by tens of ms or more,
	// which shortens the measured wait by as much. 0.1 s still fails a
	// report that says "at once" for blocks that were not yet visible; the
	// ceiling, well under the 2 s deadline, fails a fixed wait.
	if got := *p.IndexedAfterS; got < 0.1 || got > 1.9 {
		t.Errorf("indexed after %.3fs, want about 0.3s", got)
	}
}

func TestInventoryMismatchesFail(t *testing.T) {
	tests := []struct {
		name string
		cfg  preflighttest.Config
		want string
	}{
		{"model", preflighttest.Config{Workers: []preflighttest.Worker{{ID: "w1"}, {ID: "w2", Model: "llama-3.1-8b"}}},
			`w2: serves model "llama-3.1-8b", the frontend serves "qwen3-0.6b"`},
		{"block size", preflighttest.Config{Workers: []preflighttest.Worker{{ID: "w1"}, {ID: "w2", BlockSize: 32}}},
			"w2: block size 32, the frontend hashes 16-token blocks"},
		{"kv layout", preflighttest.Config{Workers: []preflighttest.Worker{{ID: "w1"}, {ID: "w2", KVBytesPerToken: 131072}}},
			"KV bytes per token differ"},
		{"refused", preflighttest.Config{Workers: twoWorkers(), Refused: [][2]string{{"w3", "block size 32 != 16"}}},
			"w3: refused by the frontend: block size 32 != 16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := preflighttest.New(t, tt.cfg)
			rep, out := run(t, testConfig(f.URL))
			inv := check(t, rep, CheckInventory)
			if inv.Status != Fail || !rep.Failed() || !strings.Contains(strings.Join(inv.Problems, "\n"), tt.want) {
				t.Errorf("inventory %s %q, want FAIL naming %q", inv.Status, inv.Problems, tt.want)
			}
			if !strings.Contains(out, tt.want) {
				t.Errorf("table lacks %q:\n%s", tt.want, out)
			}
		})
	}
}

func TestPrefixCacheOffFails(t *testing.T) {
	f := preflighttest.New(t, preflighttest.Config{Workers: []preflighttest.Worker{{ID: "w1"}, {ID: "w2", NoCache: true}}})
	rep, out := run(t, testConfig(f.URL))
	c := check(t, rep, CheckPrefix)
	if c.Status != Fail || c.Prefix[0].Status != Pass || c.Prefix[1].Status != Fail {
		t.Fatalf("prefix-cache %s %+v\n%s", c.Status, c.Prefix, out)
	}
	// Cold and warm both recompute, so whether warm TTFT also comes out
	// "not lower" is chance; only the cache count is asserted.
	want := "w2: warm requests found 0 cached tokens, want ≥ 496 (the prompt's full blocks)"
	if len(c.Problems) != 1 || !strings.HasPrefix(c.Problems[0], want) {
		t.Errorf("problems %q, want one starting %q", c.Problems, want)
	}
}

// TestRoutingByTier: workers that serve their hits from host memory get the
// routing check's hits, bytes and TTFT split by tier.
func TestRoutingByTier(t *testing.T) {
	f := preflighttest.New(t, preflighttest.Config{Workers: []preflighttest.Worker{{ID: "w1", HostTier: true}, {ID: "w2", HostTier: true}}})
	rep, out := run(t, testConfig(f.URL))
	r := check(t, rep, CheckRouting).Routing
	if r.Tiers == nil {
		t.Fatalf("no tiers in routing %+v\n%s", r, out)
	}
	if r.Tiers.HitRatio["cpu"] <= 0 || r.Tiers.HitRatio["gpu"] != 0 || r.Tiers.LoadedBytes["cpu"] <= 0 || r.Tiers.MeanTTFTS["cpu"] <= 0 {
		t.Errorf("tiers %+v, want every hit from cpu with bytes and a ttft", r.Tiers)
	}
	if !strings.Contains(out, "by KV tier") {
		t.Errorf("report lacks the tier note:\n%s", out)
	}
}

func TestRoutingWithoutKVFails(t *testing.T) {
	f := preflighttest.New(t, preflighttest.Config{Workers: twoWorkers(), Policy: "round-robin"})
	rep, out := run(t, testConfig(f.URL))
	c := check(t, rep, CheckRouting)
	if c.Status != Fail || c.Routing.HitRatio >= 0.8 || c.Routing.Policy != "round-robin" {
		t.Fatalf("routing %s %+v\n%s", c.Status, c.Routing, out)
	}
	if c.Routing.Workers["w1"] == 0 || c.Routing.Workers["w2"] == 0 {
		t.Errorf("round-robin used workers %v, want both", c.Routing.Workers)
	}
}

func TestRoutingThresholds(t *testing.T) {
	// Round-robin over two workers with 3 prefixes hits some requests; the
	// threshold decides between FAIL and WARN.
	f := preflighttest.New(t, preflighttest.Config{Workers: twoWorkers(), Policy: "round-robin"})
	cfg := testConfig(f.URL)
	cfg.MinHitRatio = 0
	rep, _ := run(t, cfg)
	c := check(t, rep, CheckRouting)
	if c.Routing.HitRatio == 1 || c.Status != Warn {
		t.Errorf("hit ratio %.2f with --min-hit-ratio 0: status %s, want WARN", c.Routing.HitRatio, c.Status)
	}
}

// gbeDeployment is the field report's setup: one prefill and one decode
// worker of qwen3-0.6b (114,688 B/token) on a 1 Gbit/s link.
func gbeDeployment(bps float64, mode string) preflighttest.Config {
	return preflighttest.Config{
		Disagg: mode,
		Workers: []preflighttest.Worker{
			{ID: "p1", Role: "prefill", PrefillA: 2e-5, PrefillB: 1e-9},
			{ID: "d1", Role: "decode", PrefillA: 2e-5, PrefillB: 1e-9},
		},
		Links: []preflighttest.Link{{From: "p1", To: "d1", BytesPerSec: bps, RTTMs: 0.2, Emulated: "1 Gbit/s (emulated)"}},
	}
}

func TestDisaggOnGigabitNeverPays(t *testing.T) {
	tests := []struct {
		name         string
		bps          float64
		tokens       int
		wantTransfer float64 // n · 114,688 / bps
		wantCell     string
	}{
		// 3,200 × 114,688 B = 367.0 MB at 119 MB/s.
		{"119 MB/s, 3,200 tokens", 1.19e8, 3200, 3.084, "3.08 s"},
		// The field report: 351.75 MB (3,067 tokens) at ≈104 MB/s ≈ 3.4 s.
		{"104 MB/s, 3,067 tokens", 1.04e8, 3067, 3.382, "3.38 s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := preflighttest.New(t, gbeDeployment(tt.bps, "always"))
			cfg := testConfig(f.URL)
			cfg.PromptTokens = []int{1500, tt.tokens, 6000}
			rep, out := run(t, cfg)

			l := check(t, rep, CheckLinks)
			if l.Status != Pass || len(l.Links) != 1 || l.Links[0].Class != "≤1 GbE" || l.Links[0].Emulated == "" ||
				math.Abs(l.Links[0].MBPerSec-tt.bps/1e6) > 0.01 {
				t.Errorf("links %s %+v", l.Status, l.Links)
			}
			c := check(t, rep, CheckDisagg)
			d := c.Disagg
			if len(d.Pairs) != 1 {
				t.Fatalf("pairs %+v", d.Pairs)
			}
			p := d.Pairs[0]
			x := p.Predictions[1]
			if x.PromptTokens != tt.tokens || math.Abs(x.TransferS-tt.wantTransfer) > 0.005 || x.KVBytes != int64(tt.tokens)*114688 {
				t.Errorf("prediction %+v, want transfer %.3fs", x, tt.wantTransfer)
			}
			if x.RemotePays || !(x.RemoteTTFTS > x.LocalTTFTS+3) {
				t.Errorf("remote %.2fs vs local %.2fs: remote must not pay", x.RemoteTTFTS, x.LocalTTFTS)
			}
			if p.BreakEvenTokens != nil || p.BreakEven != "never on this link" || d.Recommended != DisaggNever {
				t.Errorf("break-even %v %q, recommended %q", p.BreakEvenTokens, p.BreakEven, d.Recommended)
			}
			if c.Status != Warn || !strings.Contains(strings.Join(c.Problems, " "), "--disagg always on links where remote prefill never pays") {
				t.Errorf("disagg %s %q, want WARN for mode always", c.Status, c.Problems)
			}
			for _, want := range []string{tt.wantCell, "never on this link", "recommended --disagg never", "1 Gbit/s (emulated)", "≤1 GbE"} {
				if !strings.Contains(out, want) {
					t.Errorf("table lacks %q:\n%s", want, out)
				}
			}
			if n := check(t, rep, CheckPrefix).Notes; len(n) != 1 || !strings.Contains(n[0], "p1") {
				t.Errorf("prefix notes %q, want the skipped prefill worker named", n)
			}
			if rep.Failed() {
				t.Errorf("verdict FAIL; a slow link is a warning, not a failure\n%s", out)
			}
		})
	}
}

// TestDisaggBreakEven gives the prefill worker a much faster GPU and a
// 10 GB/s link: remote prefill pays once the decode worker's quadratic
// prefill outgrows the linear transfer. The search must land within one
// block of the exact threshold.
func TestDisaggBreakEven(t *testing.T) {
	p := preflighttest.Worker{ID: "p1", Role: "prefill", PrefillA: 1e-6, PrefillB: 1e-11, KVBytesPerToken: 114688}
	d := preflighttest.Worker{ID: "d1", Role: "decode", PrefillA: 5e-6, PrefillB: 2e-9, KVBytesPerToken: 114688}
	link := preflighttest.Link{From: "p1", To: "d1", BytesPerSec: 1e10, RTTMs: 0.2}
	exact := 0
	for n := 1; n <= 1<<17; n++ {
		if _, _, loc, rem := preflighttest.Predict(p, d, link, n); rem < 0.9*loc {
			exact = n
			break
		}
	}
	if exact < 1000 || exact > 10000 {
		t.Fatalf("test setup: exact break-even %d, want a mid-range length", exact)
	}
	f := preflighttest.New(t, preflighttest.Config{Workers: []preflighttest.Worker{p, d}, Links: []preflighttest.Link{link}})
	cfg := testConfig(f.URL)
	cfg.PromptTokens = []int{1000, 6000, 20000}
	rep, out := run(t, cfg)
	c := check(t, rep, CheckDisagg)
	dp := c.Disagg.Pairs[0]
	if dp.BreakEvenTokens == nil || *dp.BreakEvenTokens < exact || *dp.BreakEvenTokens > exact+16 {
		t.Fatalf("break-even %v, want within a block above %d\n%s", dp.BreakEvenTokens, exact, out)
	}
	if c.Status != Pass || c.Disagg.Recommended != DisaggAuto || dp.Predictions[0].RemotePays || !dp.Predictions[2].RemotePays {
		t.Errorf("disagg %s recommended %q predictions %+v", c.Status, c.Disagg.Recommended, dp.Predictions)
	}
	if l := check(t, rep, CheckLinks).Links[0]; l.Class != "25 GbE" && l.Class != "100 GbE / RDMA-class" {
		t.Errorf("10 GB/s classed %q", l.Class)
	}
	if !strings.Contains(out, "from "+thousands(*dp.BreakEvenTokens)+" tokens") {
		t.Errorf("table lacks the break-even:\n%s", out)
	}
}

func TestDisaggAlwaysOnlyWhenRemoteAlwaysPays(t *testing.T) {
	p := preflighttest.Worker{ID: "p1", Role: "prefill", PrefillA: 1e-6}
	d := preflighttest.Worker{ID: "d1", Role: "decode", PrefillA: 1e-4}
	f := preflighttest.New(t, preflighttest.Config{Workers: []preflighttest.Worker{p, d},
		Links: []preflighttest.Link{{From: "p1", To: "d1", BytesPerSec: 4e11, RTTMs: 0.01}}})
	rep, out := run(t, testConfig(f.URL))
	c := check(t, rep, CheckDisagg)
	if c.Disagg.Recommended != DisaggAlways || *c.Disagg.Pairs[0].BreakEvenTokens > searchStart {
		t.Errorf("recommended %q break-even %v\n%s", c.Disagg.Recommended, c.Disagg.Pairs[0].BreakEvenTokens, out)
	}
	if l := check(t, rep, CheckLinks).Links[0]; l.Class != "NVLink-class" {
		t.Errorf("400 GB/s classed %q", l.Class)
	}
}

func TestAdminKey(t *testing.T) {
	f := preflighttest.New(t, preflighttest.Config{Workers: twoWorkers(), AdminKey: "sekret"})
	cfg := testConfig(f.URL)
	rep, out := run(t, cfg)
	if ev := check(t, rep, CheckEvents); ev.Status != Fail || !strings.Contains(strings.Join(ev.Problems, " "), "pass --admin-key") {
		t.Errorf("without the key: kv-events %s %q\n%s", ev.Status, ev.Problems, out)
	}
	cfg.APIKey = "sekret" // the admin key falls back to the API key
	if rep, out := run(t, cfg); rep.Verdict != Pass {
		t.Errorf("with the key: verdict %s\n%s", rep.Verdict, out)
	}
}

func TestUnreachableFrontend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = Run(context.Background(), testConfig("http://"+addr), nil)
	if err == nil || !strings.Contains(err.Error(), "cannot reach http://"+addr+": is `switchyard up` running?") {
		t.Errorf("err = %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"url", func(c *Config) { c.URL = "localhost:8000" }, "--url"},
		{"no lengths", func(c *Config) { c.PromptTokens = nil }, "--prompt-tokens"},
		{"huge length", func(c *Config) { c.PromptTokens = []int{1 << 20} }, "--prompt-tokens 1048576"},
		{"ratio", func(c *Config) { c.MinHitRatio = 1.5 }, "--min-hit-ratio"},
		{"probe bytes", func(c *Config) { c.ProbeBytes = 0 }, "--probe-bytes"},
		{"timeout", func(c *Config) { c.Timeout = 0 }, "--timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.mod(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want mention of %q", err, tt.want)
			}
		})
	}
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
}

func TestLinkClass(t *testing.T) {
	tests := []struct {
		bps  float64
		want string
	}{
		{1.04e8, "≤1 GbE"}, {1.19e8, "≤1 GbE"}, {1.15e9, "10 GbE"}, {2.8e9, "25 GbE"},
		{1.15e10, "100 GbE / RDMA-class"}, {3.8e11, "NVLink-class"},
	}
	for _, tt := range tests {
		if got := linkClass(tt.bps); got != tt.want {
			t.Errorf("linkClass(%g) = %q, want %q", tt.bps, got, tt.want)
		}
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 131072: "131,072", -4500: "-4,500"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestWorkerURLIsNotAFrontend: preflight pointed at an engine worker (or
// anything else that answers /health) says so instead of checking "0
// workers" and printing PASSes next to a FAIL.
func TestWorkerURLIsNotAFrontend(t *testing.T) {
	w, err := sim.NewWorker(sim.Config{ID: "worker-1", KVBlocks: 64})
	if err != nil {
		t.Fatal(err)
	}
	worker := httptest.NewServer(w.Handler())
	t.Cleanup(worker.Close)
	other := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		_, _ = rw.Write([]byte(`{"status":"ok"}`))
	}))
	t.Cleanup(other.Close)
	for url, want := range map[string]string{
		worker.URL: `is not a Switchyard frontend: it answers /health as engine worker "worker-1" does; point --url at the frontend`,
		other.URL:  "is not a Switchyard frontend: its /health has no model, router policy or worker list",
	} {
		rep, err := Run(context.Background(), testConfig(url), nil)
		if err == nil || !strings.Contains(err.Error(), want) || rep != nil {
			t.Errorf("%s: report %v, err %v; want no report and %q", url, rep, err, want)
		}
	}
}

// TestNeverPublishedIsNotStale: a worker whose stream never started is said
// to have never published, not to have a stale heartbeat.
func TestNeverPublishedIsNotStale(t *testing.T) {
	never := &EventsProbe{Worker: "w1", State: "silent", LastEventAgeS: 12, DeadlineS: 2, ProbeBlocks: 4}
	if s := eventsProblem(never); !strings.Contains(s, "never published") || strings.Contains(s, "stale") {
		t.Errorf("never published: %q", s)
	}
	stale := &EventsProbe{Worker: "w1", State: "silent", Epoch: 3, LastSeq: 40, LastEventAgeS: 12, DeadlineS: 2, ProbeBlocks: 4}
	if s := eventsProblem(stale); !strings.Contains(s, "heartbeat stale") {
		t.Errorf("stale: %q", s)
	}
}

// TestBreakEvenSearchStopsAtMaxModelLen: the break-even search asks about
// no prompt longer than the pair's workers take, and says how far it went.
func TestBreakEvenSearchStopsAtMaxModelLen(t *testing.T) {
	cfg := gbeDeployment(1.19e8, "auto")
	for i := range cfg.Workers {
		cfg.Workers[i].MaxModelLen = 40960
	}
	f := preflighttest.New(t, cfg)
	rep, out := run(t, testConfig(f.URL))
	if got := f.MaxPredicted(); got > 40960 {
		t.Errorf("predict asked about %d tokens, past the workers' max_model_len 40960", got)
	}
	c := check(t, rep, CheckDisagg)
	if len(c.Disagg.Pairs) != 1 || c.Disagg.Pairs[0].SearchMaxTokens != 40960 || !strings.Contains(out, "searched up to 40,960 tokens") {
		t.Errorf("search bound %+v; want 40960 reported:\n%s", c.Disagg.Pairs, out)
	}
}
