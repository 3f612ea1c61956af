package bench

import (
	"strings"
	"testing"
)

func TestSizePrefixes(t *testing.T) {
	worker := func(id, role string, blocks int) HealthWorker {
		return HealthWorker{ID: id, Role: role, KVBlocks: blocks, BlockSize: 16}
	}
	upDefault := Health{BlockSize: 16, Workers: []HealthWorker{worker("w1", "aggregated", 3274), worker("w2", "aggregated", 3274)}}
	tests := []struct {
		name         string
		auto         bool
		prefixes     int
		h            Health
		wantPrefixes int
		wantWarmup   int
		want         string
	}{
		// A default `up`: 2 × 3274 blocks × 16 = 52,384 tokens each.
		{"default up", true, 4, upDefault, 40, 40, "40 × 2000 tokens = 80000 tokens, 1.5× the smallest worker's KV cache (52384 tokens): they do not fit in one worker"},
		{"smallest worker decides, prefill ignored", true, 4, Health{Workers: []HealthWorker{worker("d1", "decode", 1000), worker("d2", "decode", 500), worker("p1", "prefill", 10)}}, 6, 6, "smallest worker's KV cache (8000 tokens)"},
		{"given and fitting", false, 4, upDefault, 4, 4, "fit in one worker's KV cache (52384 tokens): every policy can keep every prefix everywhere"},
		{"given and not fitting", false, 30, upDefault, 30, 30, "1.1× the smallest worker's KV cache (52384 tokens): they do not fit in one worker"},
		{"one worker", true, 4, Health{Workers: []HealthWorker{worker("w1", "aggregated", 3274)}}, 4, 4, "1 serving worker(s), and routing policies differ only with two or more"},
		{"no capacity reported", true, 4, Health{Workers: []HealthWorker{{ID: "a"}, {ID: "b"}}}, 4, 4, "reports no worker's KV capacity"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Scenario, cfg.Prefixes, cfg.AutoPrefixes = ScenarioRouting, tc.prefixes, tc.auto
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			SizePrefixes(&cfg, tc.h)
			if cfg.Prefixes != tc.wantPrefixes || cfg.Warmup != tc.wantWarmup {
				t.Errorf("prefixes %d warmup %d, want %d and %d", cfg.Prefixes, cfg.Warmup, tc.wantPrefixes, tc.wantWarmup)
			}
			if !strings.Contains(cfg.PrefixSizing, tc.want) {
				t.Errorf("sizing %q does not say %q", cfg.PrefixSizing, tc.want)
			}
		})
	}
	// An explicit --warmup survives sizing.
	cfg := DefaultConfig()
	cfg.Scenario, cfg.AutoPrefixes, cfg.Warmup = ScenarioRouting, true, 2
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	SizePrefixes(&cfg, upDefault)
	if cfg.Warmup != 2 {
		t.Errorf("explicit warmup became %d", cfg.Warmup)
	}
}

func TestNotFrontend(t *testing.T) {
	for _, tc := range []struct {
		h    Health
		want string
	}{
		{Health{Status: "ok", Model: "qwen3-0.6b", Policy: "kv", Workers: []HealthWorker{}}, ""},
		{Health{Status: "unknown"}, ""}, // no JSON body: cannot tell
		{Health{Status: "ok", ID: "worker-1"}, `it answers /health as engine worker "worker-1" does`},
		{Health{Status: "ok"}, "no model, router policy or worker list"},
	} {
		if got := tc.h.NotFrontend(); !strings.Contains(got, tc.want) || (tc.want == "" && got != "") {
			t.Errorf("%+v: %q, want %q", tc.h, got, tc.want)
		}
	}
}
