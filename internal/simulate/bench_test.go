package simulate

import (
	"context"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/bench"
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

// BenchmarkThousandWorkers simulates 1,000 llama-3.1-8b H100 workers
// serving the Mooncake trace tiled five times (19,965 requests) with
// arrivals compressed to keep them about 70% busy.
func BenchmarkThousandWorkers(b *testing.B) {
	reqs, err := bench.ReadTrace(mooncakePath, bench.FormatMooncake)
	if err != nil {
		b.Fatal(err)
	}
	c := smallConfig(b, 1)
	c.Items = bench.TraceItems(bench.TileTrace(reqs, 5), 0.01348)
	c.Workers = 1000
	if err := c.Validate(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := Run(context.Background(), c); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(c.Items)*b.N)/b.Elapsed().Seconds(), "requests/s")
}
