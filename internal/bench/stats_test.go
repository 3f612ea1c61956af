package bench

import (
	"math"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	tests := []struct {
		name   string
		sample []float64
		p      float64
		want   float64
	}{
		// Expected values are numpy.percentile(x, p) with the default
		// linear method.
		{"1..100 p50", hundred, 50, 50.5},
		{"1..100 p90", hundred, 90, 90.1},
		{"1..100 p99", hundred, 99, 99.01},
		{"1..100 p0", hundred, 0, 1},
		{"1..100 p100", hundred, 100, 100},
		{"single", []float64{3}, 99, 3},
		{"pair p50", []float64{1, 2}, 50, 1.5},
		{"skewed p50", []float64{0.1, 0.2, 0.3, 10}, 50, 0.25},
		{"skewed p90", []float64{0.1, 0.2, 0.3, 10}, 90, 7.09},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sample, tt.p); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Percentile(%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
	if got := Percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("empty sample = %v, want NaN", got)
	}
}

func TestSummarize(t *testing.T) {
	ok := func(ttft, itl float64, prompt, cached int) Record {
		return Record{Outcome: OutcomeOK, TTFTS: ttft, ITLMeanS: itl, Chunks: 3, itls: []float64{itl, itl},
			E2ES: ttft + 2*itl, PromptTokens: prompt, CompletionTokens: 3, CachedTokens: cached, Worker: "w1"}
	}
	recs := []Record{
		{Warmup: true, Outcome: OutcomeOK, TTFTS: 99, PromptTokens: 1000}, // ignored
		ok(0.1, 0.01, 100, 50),
		ok(0.2, 0.01, 100, 100),
		ok(3.0, 0.01, 100, 0), // misses the TTFT SLO
		ok(0.1, 0.50, 100, 0), // misses the ITL SLO
		{Outcome: OutcomeRejected, ErrorKind: "http_429"},
		{Outcome: OutcomeRejected, ErrorKind: "http_503"},
		{Outcome: OutcomeError, ErrorKind: "stream_server_error"},
	}
	a := Summarize(recs, 2, SLO{TTFT: time.Second, ITL: 100 * time.Millisecond})
	checks := []struct {
		name      string
		got, want float64
	}{
		{"requests", float64(a.Requests), 7},
		{"ok", float64(a.OK), 4},
		{"rejected", float64(a.Rejected), 2},
		{"errors", float64(a.Errors), 1},
		{"good", float64(a.GoodRequests), 2},
		{"goodput", a.GoodputRPS, 1},
		{"requests/s", a.RequestsPerS, 2},
		{"output tokens/s", a.OutputTokensPerS, 6},
		{"hit ratio", a.HitRatio, 150.0 / 400},
		{"ttft p50", *a.TTFTP50S, 0.15},
		{"itl n", float64(a.ITL.N), 8},
		{"429s", float64(a.ErrorKinds["http_429"]), 1},
		{"worker", float64(a.Workers["w1"]), 4},
	}
	for _, c := range checks {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestMarkHit(t *testing.T) {
	tests := []struct {
		name           string
		shared, cached int
		outcome        string
		eligible, hit  bool
	}{
		{"full blocks cached", 100, 96, OutcomeOK, true, true},
		{"one block short", 100, 80, OutcomeOK, true, false},
		{"more cached than shared", 100, 112, OutcomeOK, true, true},
		{"prefix under a block", 10, 0, OutcomeOK, false, false},
		{"failed request", 100, 96, OutcomeError, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Record{SharedTokens: tt.shared, CachedTokens: tt.cached, Outcome: tt.outcome}
			markHit(&r, 16)
			if r.HitEligible != tt.eligible || r.CacheHit != tt.hit {
				t.Errorf("eligible, hit = %v, %v; want %v, %v", r.HitEligible, r.CacheHit, tt.eligible, tt.hit)
			}
		})
	}
}

// A decode worker's cached tokens include the KV it pulled from a remote
// prefill; only what it held before the pull is a hit. Engines never
// report the block holding the prompt's last token as cached, so a pulled
// last block must not cost a hit (the routing case below).
func TestMarkTransfer(t *testing.T) {
	bytes := func(tokens int) *int64 { v := int64(tokens) * 100; return &v }
	tests := []struct {
		name                        string
		r                           Record
		wantCached, wantTransferred int
		wantHit                     bool
	}{
		{"unique prompt, all pulled", Record{Prefill: "remote", KVBytes: bytes(2016), PromptTokens: 2016, CachedTokens: 2000, SharedTokens: 0}, 0, 2016, false},
		{"shared prefix held, suffix block pulled", Record{Prefill: "remote", KVBytes: bytes(16), PromptTokens: 2016, CachedTokens: 2000, SharedTokens: 2000}, 2000, 16, true},
		{"half held", Record{Prefill: "remote", KVBytes: bytes(64), PromptTokens: 130, CachedTokens: 128, SharedTokens: 64}, 64, 64, true},
		{"local prefill", Record{Prefill: "local", KVBytes: bytes(0), PromptTokens: 130, CachedTokens: 128, SharedTokens: 128}, 128, 0, true},
		{"pull not reported", Record{Prefill: "remote", PromptTokens: 130, CachedTokens: 128}, 128, 0, false},
		{"unknown worker", Record{Prefill: "remote", Worker: "w9", KVBytes: bytes(64), PromptTokens: 130, CachedTokens: 128}, 128, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.r
			r.Outcome = OutcomeOK
			if r.Worker == "" {
				r.Worker = "d1"
			}
			markTransfer(&r, map[string]int64{"d1": 100}, 16)
			markHit(&r, 16)
			if r.CachedTokens != tt.wantCached || r.TransferredTokens != tt.wantTransferred || r.CacheHit != tt.wantHit {
				t.Errorf("cached %d, transferred %d, hit %v; want %d, %d, %v", r.CachedTokens, r.TransferredTokens, r.CacheHit, tt.wantCached, tt.wantTransferred, tt.wantHit)
			}
		})
	}
}
