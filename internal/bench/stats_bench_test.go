package bench

import (
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkSummarize aggregates 10,000 successful records of 300
// inter-token gaps each (3 M gaps), a quarter of a 1,000-worker simulation's report
// (39,930 requests). Reports B/op: sizing is what it measures.
func BenchmarkSummarize(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	recs := make([]Record, 10_000)
	for i := range recs {
		gaps := make([]float64, 300)
		for j := range gaps {
			gaps[j] = 0.01 + 0.05*rng.Float64()
		}
		recs[i] = Record{Outcome: OutcomeOK, TTFTS: rng.Float64(), E2ES: 2 + rng.Float64(), PromptTokens: 1000, Chunks: 301}
		recs[i].SetITLs(gaps)
	}
	slo := SLO{TTFT: 2 * time.Second, ITL: 100 * time.Millisecond}
	if a := Summarize(recs, 100, slo); a.ITL.N != 10_000*300 || a.OK != 10_000 {
		b.Fatalf("ITL n %d, ok %d: want %d, 40000", a.ITL.N, a.OK, 10_000*300)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		Summarize(recs, 100, slo)
	}
}
