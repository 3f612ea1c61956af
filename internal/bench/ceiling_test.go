package bench

import (
	"math"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

func TestLRUCeiling(t *testing.T) {
	// Three requests of two 512-token blocks; the third repeats the first.
	reqs := []TraceRequest{
		{InputTokens: 1024, HashIDs: []int64{1, 2}},
		{InputTokens: 1024, HashIDs: []int64{3, 4}},
		{InputTokens: 1024, HashIDs: []int64{1, 2}},
	}
	tests := []struct {
		name     string
		capacity int64
		want     float64
	}{
		// Request 3 hits all but its last engine block (the last token runs).
		{"unbounded", 0, float64(1024-16) / 3072},
		{"room for both prompts", 2048, float64(1024-16) / 3072},
		// Request 2 evicted blocks 1 and 2.
		{"room for one prompt", 1024, 0},
		{"room for one and a half", 1536, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := LRUCeiling(reqs, tc.capacity, 16); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("LRUCeiling = %v, want %v", got, tc.want)
			}
		})
	}
	// A shared first block only: the hit stops at the first miss.
	prefix := []TraceRequest{{InputTokens: 1000, HashIDs: []int64{7, 8}}, {InputTokens: 1000, HashIDs: []int64{7, 9}}}
	if got, want := LRUCeiling(prefix, 0, 16), 512.0/2000; got != want {
		t.Errorf("shared first block: %v, want %v", got, want)
	}
}

func TestTierStats(t *testing.T) {
	recs := []Record{
		{Outcome: OutcomeOK, PromptTokens: 100, TTFTS: 1, KVTiers: &openai.KVTiers{}},
		{Outcome: OutcomeOK, PromptTokens: 100, TTFTS: 0.2, KVTiers: &openai.KVTiers{GPUTokens: 64}},
		{Outcome: OutcomeOK, PromptTokens: 100, TTFTS: 0.3, KVTiers: &openai.KVTiers{GPUTokens: 16, CPUTokens: 32, CPULoadedBytes: 4096}},
		{Outcome: OutcomeOK, PromptTokens: 100, TTFTS: 0.5, KVTiers: &openai.KVTiers{DiskTokens: 48, DiskLoadedBytes: 8192}},
		{Outcome: "error", PromptTokens: 100, KVTiers: &openai.KVTiers{GPUTokens: 99}},
	}
	ts := tierStats(recs)
	if ts == nil {
		t.Fatal("no tier stats")
	}
	if want := (TierValues{GPU: 0.2, CPU: 0.08, Disk: 0.12}); ts.HitRatio != want {
		t.Errorf("hit ratio %+v, want %+v", ts.HitRatio, want)
	}
	if want := (TierValues{CPU: 4096, Disk: 8192}); ts.LoadedBytes != want {
		t.Errorf("loaded %+v, want %+v", ts.LoadedBytes, want)
	}
	for k, want := range map[string]float64{"miss": 1, "gpu": 0.2, "cpu": 0.3, "disk": 0.5} {
		if q := ts.TTFTByHit[k]; q.P50 == nil || *q.P50 != want || ts.Requests[k] != 1 {
			t.Errorf("ttft %s = %+v (n=%d), want p50 %v", k, q, ts.Requests[k], want)
		}
	}
	if tierStats(recs[:0]) != nil || tierStats([]Record{{Outcome: OutcomeOK}}) != nil {
		t.Errorf("tier stats without tiered records")
	}
}
