package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestRoutingComparePolicies(t *testing.T) {
	f := &fakeFrontend{adminKey: "adm"}
	srv := startFake(t, f)
	cfg := routingConfig(srv.URL)
	cfg.AdminKey = "adm"
	cfg.Policies = []string{"round-robin", "kv"}
	cfg = mustValidate(t, cfg)
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 || rep.Model != fakeModel || rep.BlockSize != 16 || len(rep.Deployment.Workers) != 2 {
		t.Fatalf("report shape: %d runs, model %q, block %d, %d workers", len(rep.Runs), rep.Model, rep.BlockSize, len(rep.Deployment.Workers))
	}
	rr, kv := rep.Runs[0].Aggregate, rep.Runs[1].Aggregate
	if kv.OK != 24 || rr.OK != 24 || kv.HitEligible != 24 {
		t.Fatalf("ok = %d/%d, eligible %d; want 24/24, 24", kv.OK, rr.OK, kv.HitEligible)
	}
	// kv sends every repeat of a prefix to the worker holding it: prompts are
	// 108 tokens, the 100-token prefix fills 6 blocks of 16, all cached.
	if kv.Hits != 24 || kv.CachedTokens != 24*96 {
		t.Errorf("kv hits %d, cached %d; want 24, %d", kv.Hits, kv.CachedTokens, 24*96)
	}
	if rr.Hits >= kv.Hits || rr.HitRatio >= kv.HitRatio {
		t.Errorf("round-robin hits %d (ratio %.3f) not below kv %d (%.3f)", rr.Hits, rr.HitRatio, kv.Hits, kv.HitRatio)
	}
	for _, run := range rep.Runs {
		if run.ResetWorkers == nil || *run.ResetWorkers != 2 {
			t.Errorf("%s: reset workers = %v, want 2", run.Policy, run.ResetWorkers)
		}
		if got := len(run.Records); got != 24+3 {
			t.Errorf("%s: %d records, want 27 (3 warm-up)", run.Policy, got)
		}
		for _, r := range run.Records {
			if r.Policy != run.Policy || r.Worker == "" || r.OverlapTokens == nil || r.CompletionTokens != 4 || r.Chunks != 4 {
				t.Fatalf("%s: record %+v misses headers or usage", run.Policy, r)
			}
			if r.TTFTS <= 0 || r.E2ES < r.TTFTS {
				t.Fatalf("%s: record %d ttft %v e2e %v", run.Policy, r.Index, r.TTFTS, r.E2ES)
			}
		}
	}
	if got := f.resets.Load(); got != 2 {
		t.Errorf("cache resets = %d, want 2", got)
	}
	if f.policy != "kv" {
		t.Errorf("policy left at %q, want the original kv restored", f.policy)
	}

	dir := t.TempDir()
	jsonPath, plotPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.png")
	if err := WriteJSON(jsonPath, rep); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Schema string
		Runs   []struct {
			Aggregate map[string]any
			Records   []map[string]any
		}
	}
	b, _ := os.ReadFile(jsonPath)
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	checkRequired(t, b)
	for _, k := range []string{"hit_ratio", "ttft_p50_s", "ttft_p99_s", "itl_p50_s", "goodput_rps", "errors"} {
		if _, ok := back.Runs[1].Aggregate[k]; !ok {
			t.Errorf("JSON aggregate misses %q", k)
		}
	}
	if back.Schema != SchemaVersion || len(back.Runs[1].Records) != 27 {
		t.Errorf("JSON schema %q, %d records", back.Schema, len(back.Runs[1].Records))
	}
	if err := WritePlots(plotPath, rep); err != nil {
		t.Fatal(err)
	}
	a, h := PlotPaths(plotPath)
	for _, p := range []string{a, h} {
		if b, err := os.ReadFile(p); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("%s: not a PNG (%v)", p, err)
		}
	}
	var out bytes.Buffer
	if err := WriteTable(&out, rep); err != nil {
		t.Fatal(err)
	}
	if !containsAll(out.String(), "round-robin", "kv", "24/24", "cache hit ratio", "2 workers") {
		t.Errorf("table misses figures:\n%s", out.String())
	}
}

func TestFailuresAreCounted(t *testing.T) {
	f := &fakeFrontend{
		reject: func(n int64) int {
			switch {
			case n%5 == 0:
				return 429
			case n == 3:
				return 503
			case n == 11:
				return 500
			}
			return 0
		},
		midErr: func(n int64) bool { return n%7 == 0 },
	}
	srv := startFake(t, f)
	cfg := routingConfig(srv.URL)
	cfg.Requests, cfg.Warmup, cfg.Concurrency = 35, 0, 4
	rep, err := Run(context.Background(), mustValidate(t, cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := rep.Runs[0].Aggregate
	// 429 at 5,10,...,35 (7) and 503 at 3: 8 rejections; 500 at 11 and
	// mid-stream errors at 7,14,21,28 (35 was refused): 5 errors.
	if a.Requests != 35 || a.Rejected != 8 || a.Errors != 5 || a.OK != 22 {
		t.Errorf("requests %d rejected %d errors %d ok %d; want 35, 8, 5, 22", a.Requests, a.Rejected, a.Errors, a.OK)
	}
	want := map[string]int{"http_429": 7, "http_503": 1, "http_500": 1, "stream_server_error": 4}
	for k, v := range want {
		if a.ErrorKinds[k] != v {
			t.Errorf("error kind %s = %d, want %d (all: %v)", k, a.ErrorKinds[k], v, a.ErrorKinds)
		}
	}
	if a.GoodRequests > a.OK {
		t.Errorf("good %d > ok %d", a.GoodRequests, a.OK)
	}
}

func TestDisaggSweepRecordsDecisions(t *testing.T) {
	f := &fakeFrontend{remoteAt: 1000}
	srv := startFake(t, f)
	cfg := DefaultConfig()
	cfg.Scenario, cfg.URL, cfg.PromptTokens, cfg.Repeats, cfg.MaxTokens = ScenarioDisagg, srv.URL, []int{500, 1500}, 2, 3
	rep, err := Run(context.Background(), mustValidate(t, cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	gs := rep.Runs[0].Groups
	if len(gs) != 2 || gs[0].Key != "500" || gs[1].Key != "1500" {
		t.Fatalf("groups = %+v", gs)
	}
	if gs[0].Aggregate.PrefillLocal != 2 || gs[1].Aggregate.PrefillRemote != 2 || gs[1].DisaggReasons["link_faster"] != 2 {
		t.Errorf("decisions: small %+v, large %+v", gs[0], gs[1])
	}
	if gs[1].PredictedTTFTMsMean == nil || *gs[1].PredictedTTFTMsMean != 150 {
		t.Errorf("predicted TTFT mean = %v, want 150", gs[1].PredictedTTFTMsMean)
	}
	if a := rep.Runs[0].Aggregate; a.CachedTokens != 0 || a.OK != 4 {
		t.Errorf("unique prompts hit the cache: %d cached tokens, %d ok", a.CachedTokens, a.OK)
	}
}

// KV a decode worker pulled from a remote prefill is reported as
// transferred, not as a cache hit: a disagg always run of unique prompts
// reported a hit ratio near 1 when the worker's cached_tokens were taken
// as they came.
func TestDisaggPulledKVIsNotACacheHit(t *testing.T) {
	f := &fakeFrontend{remoteAt: 1000, adminKey: "adm"}
	srv := startFake(t, f)
	cfg := DefaultConfig()
	cfg.Scenario, cfg.URL, cfg.AdminKey = ScenarioDisagg, srv.URL, "adm"
	cfg.PromptTokens, cfg.Repeats, cfg.MaxTokens = []int{500, 1500}, 2, 2
	cfg.DisaggModes = []string{"always", "auto"}
	rep, err := Run(context.Background(), mustValidate(t, cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Remote prefills move every full block of these unique prompts.
	for i, want := range []int{2 * (500/16*16 + 1500/16*16), 2 * (1500 / 16 * 16)} {
		a := rep.Runs[i].Aggregate
		if a.OK != 4 || a.TransferredTokens != want || a.CachedTokens != 0 || a.HitRatio != 0 {
			t.Errorf("disagg %s: ok %d, transferred %d, cached %d, hit ratio %.3f; want 4, %d, 0, 0",
				rep.Runs[i].DisaggMode, a.OK, a.TransferredTokens, a.CachedTokens, a.HitRatio, want)
		}
	}
	for _, r := range rep.Runs[1].Records {
		if r.Warmup {
			continue
		}
		if want := map[string]int{"local": 0, "remote": 1488}[r.Prefill]; r.TransferredTokens != want {
			t.Errorf("%s prefill of %d tokens: transferred %d, want %d", r.Prefill, r.PromptTokens, r.TransferredTokens, want)
		}
	}
	var out strings.Builder
	if err := WriteTable(&out, rep); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`KV transferred tokens\s+3968\s+2976`).MatchString(out.String()) {
		t.Errorf("table lacks the transferred tokens 3968 and 2976:\n%s", out.String())
	}
}

func TestTraceReplayMooncake(t *testing.T) {
	f := &fakeFrontend{}
	srv := startFake(t, f)
	cfg := DefaultConfig()
	cfg.Scenario, cfg.URL, cfg.TracePath, cfg.TraceFormat = ScenarioTrace, srv.URL, mooncakePath, FormatMooncake
	// The first reuse of a prefix block comes at request 49. One request at a
	// time keeps arrival order equal to routing order in the fake.
	cfg.MaxRequests, cfg.TimeScale, cfg.Concurrency = 60, 0.001, 1
	rep, err := Run(context.Background(), mustValidate(t, cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	trace, err := ReadTrace(mooncakePath, FormatMooncake)
	if err != nil {
		t.Fatal(err)
	}
	a := rep.Runs[0].Aggregate
	if a.OK != 60 {
		t.Fatalf("ok = %d, want 60 (%v)", a.OK, a.ErrorKinds)
	}
	// The fake's kv policy keeps everything on w0, so each request's cached
	// tokens are exactly its leading hash ids seen before, in 16-token blocks.
	seen := map[int64]bool{}
	wantCached := 0
	for _, r := range rep.Runs[0].Records {
		tr := trace[r.Index]
		if r.PromptTokens != tr.InputTokens || r.CompletionTokens != max(tr.OutputTokens, 1) {
			t.Errorf("request %d: %d/%d tokens, want %d/%d", r.Index, r.PromptTokens, r.CompletionTokens, tr.InputTokens, tr.OutputTokens)
		}
		m := 0
		for m < len(tr.HashIDs) && seen[tr.HashIDs[m]] {
			m++
		}
		want := min(m*MooncakeBlockTokens, tr.InputTokens) / 16 * 16
		if r.CachedTokens != want {
			t.Errorf("request %d: cached %d, want %d", r.Index, r.CachedTokens, want)
		}
		wantCached += want
		for _, h := range tr.HashIDs {
			seen[h] = true
		}
	}
	if wantCached == 0 || a.CachedTokens != wantCached {
		t.Errorf("cached tokens = %d, want %d (> 0)", a.CachedTokens, wantCached)
	}
}

func TestAdminErrorsSayWhatToDo(t *testing.T) {
	tests := []struct {
		name string
		f    *fakeFrontend
		key  string
		want string
	}{
		{"wrong key", &fakeFrontend{adminKey: "right"}, "wrong", "--admin-key"},
		{"no admin api", &fakeFrontend{noAdmin: true}, "", "no admin API"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startFake(t, tt.f)
			cfg := routingConfig(srv.URL)
			cfg.AdminKey, cfg.Policies = tt.key, []string{"kv", "round-robin"}
			_, err := Run(context.Background(), mustValidate(t, cfg), nil)
			if err == nil || !containsAll(err.Error(), "bench: ", tt.want) {
				t.Errorf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestSelftest(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Scenario, cfg.Requests, cfg.Prefixes, cfg.PrefixTokens, cfg.SuffixTokens, cfg.Warmup = ScenarioSelftest, 500, 4, 64, 8, 0
	cfg.MaxTokens, cfg.Concurrency = 4, 16
	var progress bytes.Buffer
	rep, err := Selftest(context.Background(), mustValidate(t, cfg), NewProgress(&progress, false))
	if err != nil {
		t.Fatal(err)
	}
	a := rep.Runs[0].Aggregate
	if a.OK != 500 || a.OutputTokensPerS <= 0 || a.RequestsPerS <= 0 || a.InputTokensPerS <= 0 {
		t.Errorf("selftest aggregate %+v", a)
	}
	if !bytes.Contains(progress.Bytes(), []byte("500/500 done")) {
		t.Errorf("progress output %q lacks the final line", progress.String())
	}
}

func TestDisaggCompareModes(t *testing.T) {
	f := &fakeFrontend{remoteAt: 1000, adminKey: "adm"}
	srv := startFake(t, f)
	cfg := DefaultConfig()
	cfg.Scenario, cfg.URL, cfg.AdminKey = ScenarioDisagg, srv.URL, "adm"
	cfg.PromptTokens, cfg.Repeats, cfg.MaxTokens = []int{500, 1500}, 2, 2
	cfg.DisaggModes = []string{"never", "always", "auto"}
	rep, err := Run(context.Background(), mustValidate(t, cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 3 {
		t.Fatalf("%d runs, want 3", len(rep.Runs))
	}
	tests := []struct {
		mode          string
		local, remote int
	}{{"never", 0, 0}, {"always", 0, 4}, {"auto", 2, 2}}
	for i, tt := range tests {
		r := rep.Runs[i]
		if r.DisaggMode != tt.mode || r.ResetWorkers == nil {
			t.Errorf("run %d: mode %q, reset %v; want %q and a reset", i, r.DisaggMode, r.ResetWorkers, tt.mode)
		}
		if got := r.Aggregate; got.PrefillLocal != tt.local || got.PrefillRemote != tt.remote || got.OK != 4 {
			t.Errorf("mode %s: local/remote %d/%d ok %d; want %d/%d ok 4", tt.mode, got.PrefillLocal, got.PrefillRemote, got.OK, tt.local, tt.remote)
		}
	}
	if got := f.resets.Load(); got != 3 {
		t.Errorf("%d cache resets, want one per mode", got)
	}
	f.mu.Lock()
	mode := f.mode
	f.mu.Unlock()
	if mode != "auto" {
		t.Errorf("mode left at %q, want the original auto restored", mode)
	}
	var out strings.Builder
	if err := WriteTable(&out, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"disagg never", "disagg always", "disagg auto", "by prompt size (", "disagg always)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	// Each run names the policy that served it and its mode: in the
	// JSON, the table's first column and the plot's legend.
	for _, r := range rep.Runs {
		if r.Policy == "" || runName(r) == "as deployed" || !strings.Contains(runName(r), r.DisaggMode) {
			t.Errorf("run %q/%q: the JSON has no policy or the plot calls it %q", r.Policy, r.DisaggMode, runName(r))
		}
	}
	if !regexp.MustCompile(`(?m)^\s*run\s`).MatchString(out.String()) || regexp.MustCompile(`(?m)^\s*policy\s`).MatchString(out.String()) {
		t.Errorf("the table's first column should be headed run, not policy:\n%s", out.String())
	}
}

func TestTraceLongShare(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Scenario, cfg.URL, cfg.TraceFormat = ScenarioTrace, "http://127.0.0.1:1", FormatAzure
	cfg.TracePath = "../../../shared/data/traces/azure2023_AzureLLMInferenceTrace_conv.csv"
	cfg.MaxRequests, cfg.LongShare, cfg.LongTokens = 1000, 0.1, 4000
	plan, err := BuildPlan(mustValidate(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	long := 0
	for _, it := range plan.Items {
		if it.Group == "long" {
			long++
			if it.InputTokens != 4000 {
				t.Errorf("long item %d has %d tokens", it.Index, it.InputTokens)
			}
		}
	}
	// 1000 Bernoulli(0.1) draws: mean 100, sd 9.5; 60..140 is > 4 sd.
	if long < 60 || long > 140 {
		t.Errorf("%d of 1000 requests made long, want about 100", long)
	}
	again, err := BuildPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range plan.Items {
		if plan.Items[i].InputTokens != again.Items[i].InputTokens {
			t.Fatalf("item %d: %d then %d tokens: not deterministic", i, plan.Items[i].InputTokens, again.Items[i].InputTokens)
		}
	}
	bad := cfg
	bad.LongShare = 1.5
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "--long-share") {
		t.Errorf("Validate(long share 1.5) = %v", err)
	}
	bad = cfg
	bad.DisaggModes = []string{"sometimes"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "--compare-disagg") {
		t.Errorf("Validate(mode sometimes) = %v", err)
	}
}
