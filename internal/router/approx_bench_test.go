package router

import (
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkApproxRecord: recording a cold 125-block prompt (a 2,000-token
// chat in 16-token blocks) into an approximate index already at its
// default capacity, so every record also evicts: the open-addressed table
// (table) and the Go map it replaced (map, refApprox).
//
//	go test -run '^$' -bench ApproxRecord -count 6 ./internal/router
func BenchmarkApproxRecord(b *testing.B) {
	const blocks, capacity = 125, 1 << 20
	type recorder interface {
		record(worker string, hashes []uint64, now time.Time)
		len() int
	}
	run := func(b *testing.B, a recorder) {
		rng := rand.New(rand.NewPCG(1, 2))
		hashes := make([]uint64, blocks)
		fill := func() {
			for i := range hashes {
				hashes[i] = rng.Uint64()
			}
		}
		workers := []string{"w0", "w1", "w2", "w3"}
		now := time.Unix(1e9, 0)
		for i := 0; a.len() < capacity || i < 2*capacity/blocks; i++ {
			fill()
			a.record(workers[i%4], hashes, now)
		}
		for i := 0; b.Loop(); i++ {
			fill()
			a.record(workers[i%4], hashes, now)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/blocks, "ns/block")
	}
	b.Run("table", func(b *testing.B) { run(b, newApprox(time.Minute, capacity)) })
	b.Run("map", func(b *testing.B) { run(b, newRefApprox(time.Minute, capacity)) })
}
