package sim

import (
	"testing"
	"time"
)

// BenchmarkStep256 measures one scheduler step with 256 running decoding
// sequences (target ≤ 50 µs), including block commits, token generation and
// the roofline. The batch is rebuilt, untimed, before sequences get near
// their end.
func BenchmarkStep256(b *testing.B) {
	const seqs, prompt, maxOut = 256, 200, 20000
	w, err := NewWorker(Config{KVBlocks: seqs * (prompt + maxOut) / 16, MaxNumSeqs: seqs})
	if err != nil {
		b.Fatal(err)
	}
	e := w.Engine
	var st stepState
	var streams []*Stream
	setup := func() {
		for _, s := range streams {
			s.Close()
		}
		streams = streams[:0]
		for i := range seqs {
			toks := make([]uint32, prompt)
			for j := range toks {
				toks[j] = uint32(i*1000 + j)
			}
			s, err := e.Submit(Request{Tokens: toks, MaxTokens: maxOut})
			if err != nil {
				b.Fatal(err)
			}
			streams = append(streams, s)
		}
		e.mu.Lock()
		for len(e.waiting) > 0 || e.running[len(e.running)-1].outputs() == 0 {
			e.step(&st)
		}
		e.mu.Unlock()
	}
	setup()
	b.ReportAllocs()
	b.ResetTimer()
	steps := 0
	for b.Loop() {
		e.mu.Lock()
		dt := e.step(&st)
		n := len(st.batch)
		done := e.running[0].outputs() >= maxOut-100
		e.mu.Unlock()
		if dt == 0 || n != seqs {
			b.Fatalf("step ran %d sequences, want %d", n, seqs)
		}
		steps++
		if done {
			b.StopTimer()
			setup()
			b.StartTimer()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(e.clock)/float64(time.Millisecond)/float64(e.steps), "sim-ms/step")
}
