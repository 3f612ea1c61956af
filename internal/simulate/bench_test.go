package simulate

import (
	"context"
	"testing"
)

// BenchmarkMooncakeTrace simulates the whole Mooncake trace (3,993
// requests) on 16 llama-3.1-8b H100 workers per iteration and reports
// simulated requests per wall second.
func BenchmarkMooncakeTrace(b *testing.B) {
	c := smallConfig(b, 3993)
	c.Workers = 16
	if err := c.Validate(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		rep, err := Run(context.Background(), c)
		if err != nil {
			b.Fatal(err)
		}
		if a := rep.Runs[0].Aggregate; a.OK+a.Errors != 3993 {
			b.Fatalf("ok %d + errors %d != 3993", a.OK, a.Errors)
		}
	}
	b.ReportMetric(float64(3993*b.N)/b.Elapsed().Seconds(), "requests/s")
}
