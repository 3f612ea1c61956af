package router

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

// BenchmarkPick measures a warm kv Pick among 16 timed candidates for a
// 128-block prompt: without a request ID ("pick"), booking the request and
// releasing it ("book"), and one request's whole life in the router: its
// booking Pick, Started, FirstToken and Finished ("request").
//
//	go test -run '^$' -bench Pick -count 5 ./internal/router
func BenchmarkPick(b *testing.B) {
	idx := kvindex.New(kvindex.Config{})
	r, clk := newTestRouter(b, Config{Index: idx})
	h := hashes(7, 128)
	p := h100Profile(b)
	cands := make([]Worker, 16)
	for i := range cands {
		cands[i] = Worker{ID: fmt.Sprintf("w%d", i), EventsHealthy: true, Profile: &p}
		idx.Store(cands[i].ID, h[:i*8+1])
	}
	req := &Request{Hashes: h, PromptTokens: len(h) * 16, OutputTokens: 64, BlockSize: 16}
	// Check the result before timing: the longest overlap wins on idle workers.
	if d, err := r.Pick(req, cands); err != nil || d.Worker != "w15" {
		b.Fatalf("Pick = %+v, %v; want w15", d, err)
	}
	b.Run("pick", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.Pick(req, cands); err != nil {
				b.Fatal(err)
			}
		}
	})
	breq := &Request{Hashes: h, PromptTokens: len(h) * 16, OutputTokens: 64, BlockSize: 16}
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = fmt.Sprintf("req-%d", i)
	}
	b.Run("book", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			breq.ID = ids[i%len(ids)]
			i++
			d, err := r.Pick(breq, cands)
			if err != nil {
				b.Fatal(err)
			}
			r.Release(d.Worker, breq.ID)
		}
	})
	if n := r.InFlight(); n != 0 {
		b.Fatalf("%d requests left in flight", n)
	}
	b.Run("request", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			id := ids[i%len(ids)]
			breq.ID = id
			i++
			// 10 ms between requests keeps about 100 recent finishes per
			// worker, as 100 requests a second would.
			clk.Advance(10 * time.Millisecond)
			d, err := r.Pick(breq, cands)
			if err != nil {
				b.Fatal(err)
			}
			r.Started(d.Worker, id, len(h)-d.OverlapBlocks, len(h))
			r.FirstToken(d.Worker, id)
			r.Finished(d.Worker, id)
		}
	})
}

// BenchmarkPick1000 prices one kv-policy decision over 1,000 H100
// candidates, as `switchyard simulate --workers 1000` does for every
// request: each candidate has a fresh load report, requests in flight and
// a few finished since its report, and a tenth of them cache part of the
// prompt (64 blocks of 16 tokens).
func BenchmarkPick1000(b *testing.B) {
	const nw, blocks = 1000, 64
	prof := h100Profile(b)
	idx := kvindex.New(kvindex.Config{})
	r, clk := newTestRouter(b, Config{Index: idx, Policy: PolicyKV})
	prompt := hashes(1, blocks)
	ws := make([]Worker, nw)
	for i := range ws {
		ws[i] = Worker{ID: fmt.Sprintf("worker-%d", i), EventsHealthy: true, Profile: &prof}
		if i%10 == 0 {
			idx.Store(ws[i].ID, prompt[:1+i%blocks])
		}
		for j := range 6 {
			r.Started(ws[i].ID, fmt.Sprint(i, "/", j), 50+j, 100+j)
		}
		r.ObserveLoad(ws[i].ID, LoadReport{QueuedPrefillBlocks: 300, ActiveDecodeBlocks: 900, Running: 5, Waiting: 1})
		clk.Advance(time.Millisecond)
		for j := range 3 {
			r.Finished(ws[i].ID, fmt.Sprint(i, "/", j))
		}
	}
	req := &Request{Hashes: prompt, PromptTokens: blocks * 16, OutputTokens: 200, BlockSize: 16}
	d, err := r.Pick(req, ws)
	if err != nil || d.OverlapBlocks == 0 {
		b.Fatalf("pick %+v, %v: want a worker caching part of the prompt", d, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Pick(req, ws); err != nil {
			b.Fatal(err)
		}
	}
}
