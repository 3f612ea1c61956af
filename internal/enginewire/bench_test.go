package enginewire

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkDecodeBatch decodes vLLM 0.26 payloads of one BlockStored of 64
// blocks of 16 tokens (ids up to 151k, as Qwen's vocabulary) and one
// BlockRemoved of 64: the decoder alone, to set beside kvevents'
// BenchmarkDecodeBatch (Switchyard's own codec) and the bridge's
// BenchmarkDecodeRewrite (decode plus rewrite).
func BenchmarkDecodeBatch(b *testing.B) {
	for _, c := range []struct {
		name string
		l    Layout
	}{{"map-events", Layout{}}, {"array-events", Layout{ArrayEvents: true}}, {"bin-hashes", Layout{BinHashes: true}}} {
		b.Run(c.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			hs := make([]uint64, 64)
			for i := range hs {
				hs[i] = rng.Uint64()
			}
			toks := make([]uint32, 64*16)
			for i := range toks {
				toks[i] = uint32(rng.IntN(151000))
			}
			data := AppendBatch(nil, &Batch{Events: []Event{
				{Kind: BlockStored, BlockHashes: hs, TokenIDs: toks, BlockSize: 16},
				{Kind: BlockRemoved, BlockHashes: hs},
			}}, c.l)
			var bt Batch
			if err := DecodeBatch(data, &bt); err != nil || len(bt.Events[0].TokenIDs) != 1024 {
				b.Fatalf("decode: %v", err)
			}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := DecodeBatch(data, &bt); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}
