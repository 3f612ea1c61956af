package bridge

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/enginewire"
)

// engineFrames makes n vLLM 0.26 payloads of 64 blocks of 16 tokens each:
// chains of fresh prompts, each batch also evicting its predecessor's
// blocks, so the mirror stays at a steady size as in a busy engine.
func engineFrames(n int, l enginewire.Layout) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	const blocks = 64
	frames := make([][]byte, n)
	var prev []uint64
	for i := range frames {
		hs := make([]uint64, blocks)
		for j := range hs {
			hs[j] = rng.Uint64()
		}
		toks := make([]uint32, blocks*16)
		for j := range toks {
			toks[j] = uint32(rng.IntN(151000))
		}
		evs := []enginewire.Event{{Kind: enginewire.BlockStored, BlockHashes: hs, TokenIDs: toks, BlockSize: 16}}
		if prev != nil {
			evs = append(evs, enginewire.Event{Kind: enginewire.BlockRemoved, BlockHashes: prev})
		}
		frames[i] = enginewire.AppendBatch(nil, &enginewire.Batch{TS: float64(i), Events: evs}, l)
		prev = hs
	}
	return frames
}

// BenchmarkDecodeRewrite is the bridge's hot path: decode a vLLM payload
// and rewrite its blocks into Switchyard hashes through the mirror. The
// issue's target is ≥ 2M blocks/s on one core for 16-token blocks; compare
// kvevents' BenchmarkDecodeBatch for the existing codec.
func BenchmarkDecodeRewrite(b *testing.B) {
	for _, c := range []struct {
		name string
		l    enginewire.Layout
	}{{"map-events", enginewire.Layout{}}, {"array-events", enginewire.Layout{ArrayEvents: true}}} {
		b.Run(c.name, func(b *testing.B) {
			frames := engineFrames(256, c.l)
			m := NewMirror(16)
			var eb enginewire.Batch
			stored := 0
			for _, f := range frames { // check before timing
				if err := enginewire.DecodeBatch(f, &eb); err != nil {
					b.Fatal(err)
				}
				out, err := m.Apply(&eb)
				if err != nil || len(out) == 0 || len(out[0].Hashes) != 64 {
					b.Fatalf("apply: %v %d", err, len(out))
				}
			}
			if m.Len() != 64 {
				b.Fatalf("mirror holds %d blocks, want 64", m.Len())
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f := frames[i%len(frames)]
				if err := enginewire.DecodeBatch(f, &eb); err != nil {
					b.Fatal(err)
				}
				if _, err := m.Apply(&eb); err != nil {
					b.Fatal(err)
				}
				stored += 64
			}
			b.ReportMetric(float64(stored)/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}

// BenchmarkMirrorRSS fills a mirror with 1M blocks (chains of 64) and
// reports the Go heap it takes, the bulk of a bridge's memory.
func BenchmarkMirrorRSS(b *testing.B) {
	const total = 1 << 20
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m := NewMirror(16)
		rng := rand.New(rand.NewPCG(3, 4))
		toks := make([]uint32, 64*16)
		hs := make([]uint64, 64)
		eb := enginewire.Batch{Events: []enginewire.Event{{Kind: enginewire.BlockStored, BlockSize: 16, TokenIDs: toks, BlockHashes: hs}}}
		for n := 0; n < total; n += 64 {
			for j := range hs {
				hs[j] = rng.Uint64()
			}
			toks[0] = uint32(n)
			if _, err := m.Apply(&eb); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if m.Len() != total {
			b.Fatalf("mirror %d, want %d", m.Len(), total)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/total, "heap-bytes/block")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MiB/1M-blocks")
		runtime.KeepAlive(m)
	}
}
