package router

import (
	"testing"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/perfmodel"
)

// TestTimeCostHitAgainstLoad: worker a holds a 16,000-token prompt
// (1,000 blocks) in GPU memory, b holds nothing. On llama-3.1-8b on an
// H100 the hit saves ~0.7 s of prefill (P(16000, 0) − P(16, 15984)) and a
// queued block costs 16·τ ≈ 0.64 ms, so the hit is worth about 1,100
// queued blocks; a decode block costs ~0.75 µs per step read. The block
// cost got the decode case wrong: 2,000 decode blocks outweighed the
// 1,000-block hit.
func TestTimeCostHitAgainstLoad(t *testing.T) {
	const bs, blocks, out = 16, 1000, 100
	tests := []struct {
		name           string
		queued, decode int // a's load, in blocks
		want           string
	}{
		{"idle holder", 0, 0, "a"},
		{"shallow queue: the hit saves more than the wait", 500, 0, "a"},
		{"deep queue: the wait exceeds the hit", 3000, 0, "b"},
		{"long decodes are not prefill work", 0, 2000, "a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			idx := kvindex.New(kvindex.Config{})
			r, _ := newTestRouter(t, Config{Index: idx})
			h := hashes(11, blocks)
			idx.Store("a", h)
			if tc.queued > 0 {
				r.Started("a", "queued", tc.queued, tc.queued)
			}
			if tc.decode > 0 {
				r.Started("a", "decoding", tc.decode, tc.decode)
				r.FirstToken("a", "decoding")
			}
			p := h100Profile(t)
			cands := []Worker{{ID: "a", EventsHealthy: true, Profile: &p}, {ID: "b", EventsHealthy: true, Profile: &p}}
			d, err := r.Pick(&Request{Hashes: h, PromptTokens: blocks * bs, OutputTokens: out, BlockSize: bs}, cands)
			if err != nil {
				t.Fatal(err)
			}
			if d.Worker != tc.want {
				t.Errorf("picked %s at cost %.3f s, want %s", d.Worker, d.Cost, tc.want)
			}
		})
	}
}

// TestTimeCostBreakEven pins the formula at its break-even: the holder
// wins while its queue wait is below the prefill time its hit saves, and
// loses past it, both on the profile's own numbers.
func TestTimeCostBreakEven(t *testing.T) {
	const bs, blocks = 16, 1000
	p := h100Profile(t)
	n := blocks * bs
	saved := perfmodel.PrefillTime(&p, n, 0) - perfmodel.PrefillTime(&p, bs, n-bs)
	tau := perfmodel.PrefillTime(&p, p.MaxBatchTokens, 0).Seconds() / float64(p.MaxBatchTokens)
	even := int(saved.Seconds() / (tau * bs))
	for _, q := range []struct {
		queued int
		want   string
	}{{even - even/20, "a"}, {even + even/20, "b"}} {
		idx := kvindex.New(kvindex.Config{})
		r, _ := newTestRouter(t, Config{Index: idx})
		h := hashes(12, blocks)
		idx.Store("a", h)
		r.Started("a", "queued", q.queued, q.queued)
		cands := []Worker{{ID: "a", EventsHealthy: true, Profile: &p}, {ID: "b", EventsHealthy: true, Profile: &p}}
		d, err := r.Pick(&Request{Hashes: h, PromptTokens: n, BlockSize: bs}, cands)
		if err != nil {
			t.Fatal(err)
		}
		if d.Worker != q.want {
			t.Errorf("a queued %d blocks (break-even %d): picked %s, want %s", q.queued, even, d.Worker, q.want)
		}
	}
}

// TestTimeCostNeedsEveryProfile: one candidate without a timing profile
// sends the pick back to the block cost, where a's 2,000 decode blocks
// outweigh its 1,000-block hit.
func TestTimeCostNeedsEveryProfile(t *testing.T) {
	const bs, blocks = 16, 1000
	idx := kvindex.New(kvindex.Config{})
	r, _ := newTestRouter(t, Config{Index: idx})
	h := hashes(13, blocks)
	idx.Store("a", h)
	r.Started("a", "decoding", 2000, 2000)
	r.FirstToken("a", "decoding")
	p := h100Profile(t)
	var unpriced = p
	unpriced.PeakFLOPS = 0
	cands := []Worker{{ID: "a", EventsHealthy: true, Profile: &p}, {ID: "b", EventsHealthy: true, Profile: &unpriced}}
	d, err := r.Pick(&Request{Hashes: h, PromptTokens: blocks * bs, OutputTokens: 100, BlockSize: bs}, cands)
	if err != nil {
		t.Fatal(err)
	}
	if d.Worker != "b" || d.Cost != blocks {
		t.Errorf("picked %s at cost %v, want b at the block cost %d", d.Worker, d.Cost, blocks)
	}
}

// TestTimeCostLoadAfterQueue: a CPU-tier hit on a worker with a queue is
// priced as the queue wait, then the load, then the rest of the prefill:
// the engine starts a load only when it admits the prompt.
func TestTimeCostLoadAfterQueue(t *testing.T) {
	const bs, blocks = 16, 1000
	p := h100Profile(t)
	var pr pricer
	w := Worker{ID: "a", Profile: &p}
	cpu := kvindex.TierCounts{0, blocks, 0}
	load := perfmodel.LoadTime(&p, perfmodel.TierCPU, blocks*bs).Seconds()
	own := perfmodel.PrefillTime(&p, bs, blocks*bs-bs).Seconds() // the last block computes, for its logits
	tau := perfmodel.PrefillTime(&p, p.MaxBatchTokens, 0).Seconds() / float64(p.MaxBatchTokens)
	for _, queued := range []int{0, 200} {
		w.Load.QueuedPrefillBlocks = queued
		wait := float64(queued*bs) * tau
		if got, want := pr.estimate(&w, cpu, blocks*bs, 1, bs, false).ttft*p.Speedup, wait+load+own; !near(got, want) {
			t.Errorf("queued %d: ttft %.6f s, want wait + load + own prefill %.6f s", queued, got, want)
		}
		if got, want := pr.estimate(&w, cpu, blocks*bs, 1, bs, true).ttft*p.Speedup, wait+perfmodel.PrefillTime(&p, blocks*bs, 0).Seconds(); !near(got, want) {
			t.Errorf("queued %d, tier-blind: ttft %.6f s, want wait + full prefill %.6f s", queued, got, want)
		}
	}
}

func near(a, b float64) bool { return a > b*0.999999-1e-9 && a < b*1.000001+1e-9 }
