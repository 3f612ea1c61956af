package router

import (
	"fmt"
	"sync"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

// TestConcurrentPicksSpread: N requests with one prompt, picked at once on
// N idle workers with no Started between, go to N different workers. Pick
// books each request in the same critical section as its decision; when
// load was counted only at Started, every one of them saw N idle workers
// and the tie rank, a function of the prompt, sent them all to one.
func TestConcurrentPicksSpread(t *testing.T) {
	const n = 8
	for _, policy := range []string{PolicyKV, PolicyLeastLoaded} {
		t.Run(policy, func(t *testing.T) {
			idx := kvindex.New(kvindex.Config{})
			r, _ := newTestRouter(t, Config{Index: idx, Policy: policy})
			cands := make([]Worker, n)
			for i := range cands {
				cands[i] = Worker{ID: fmt.Sprintf("w%d", i), EventsHealthy: true}
			}
			h := hashes(3, 20)
			got := make([]string, n)
			var ready, wg sync.WaitGroup
			ready.Add(n)
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ready.Done()
					<-start
					d, err := r.Pick(&Request{ID: fmt.Sprintf("r%d", i), Hashes: h, PromptTokens: 80, BlockSize: 4}, cands)
					if err != nil {
						t.Error(err)
						return
					}
					got[i] = d.Worker
				}()
			}
			ready.Wait()
			close(start)
			wg.Wait()
			per := map[string]int{}
			for _, w := range got {
				per[w]++
			}
			if len(per) != n {
				t.Errorf("%d identical requests picked at once landed on %d workers, want %d: %v", n, len(per), n, per)
			}
			for i := range cands {
				if l := r.Load(cands[i].ID); l.InFlight != per[cands[i].ID] || l.QueuedPrefillBlocks != 20*per[cands[i].ID] {
					t.Errorf("%s: load %+v, want %d booked with 20 prefill blocks each", cands[i].ID, l, per[cands[i].ID])
				}
			}
		})
	}
}

// TestBookingLifecycle: what Pick books, Started confirms or updates,
// Release and Finished take back, per worker and request.
func TestBookingLifecycle(t *testing.T) {
	idx := kvindex.New(kvindex.Config{})
	r, _ := newTestRouter(t, Config{Index: idx})
	h := hashes(5, 10)
	idx.Store("d", h[:4])
	decode := []Worker{{ID: "d", EventsHealthy: true}}
	prefill := []Worker{{ID: "p", EventsHealthy: true}}
	req := &Request{ID: "r1", Hashes: h, PromptTokens: 42, BlockSize: 4}

	if _, err := r.Pick(req, decode); err != nil {
		t.Fatal(err)
	}
	if got, want := r.Load("d"), (Load{QueuedPrefillBlocks: 6, InFlight: 1}); got != want {
		t.Errorf("decode after Pick: %+v, want %+v (10 blocks less 4 held)", got, want)
	}
	// The same ID on the prefill pool: a second booking, not a move.
	if _, err := r.Pick(req, prefill); err != nil {
		t.Fatal(err)
	}
	if got, want := r.Load("p"), (Load{QueuedPrefillBlocks: 10, InFlight: 1}); got != want {
		t.Errorf("prefill after Pick: %+v, want %+v", got, want)
	}
	if got := r.Load("d").InFlight; got != 1 {
		t.Errorf("decode in flight after the prefill Pick: %d, want 1", got)
	}
	// Remote prefill: the decode worker computes nothing, yet stays counted.
	r.Started("d", "r1", 0, 11)
	r.Started("d", "r1", 0, 11) // idempotent
	if got, want := r.Load("d"), (Load{InFlight: 1}); got != want {
		t.Errorf("decode after Started with 0 prefill blocks: %+v, want %+v", got, want)
	}
	r.Started("p", "r1", 10, 11)
	r.Finished("p", "r1")
	if got := r.Load("p"); got != (Load{}) {
		t.Errorf("prefill after Finished: %+v, want zero", got)
	}
	// The remote prefill failed after all: local prefill of what d lacks.
	r.Started("d", "r1", 6, 11)
	if got, want := r.Load("d"), (Load{QueuedPrefillBlocks: 6, InFlight: 1}); got != want {
		t.Errorf("decode after Started with 6: %+v, want %+v", got, want)
	}
	r.FirstToken("d", "r1")
	r.Started("d", "r1", 9, 11) // after the first token: fixed
	if got, want := r.Load("d"), (Load{ActiveDecodeBlocks: 6, InFlight: 1}); got != want {
		t.Errorf("decode after first token: %+v, want %+v", got, want)
	}
	r.Finished("d", "r1")
	if got := r.Load("d"); got != (Load{}) {
		t.Errorf("decode after Finished: %+v, want zero", got)
	}

	// A booking that never reaches its worker is released.
	if _, err := r.Pick(&Request{ID: "r2", Hashes: h}, prefill); err != nil {
		t.Fatal(err)
	}
	r.Release("p", "r2")
	r.Release("p", "r2") // unknown by now: nothing
	r.Release("d", "r2") // never booked there: nothing
	if got := r.Load("p"); got != (Load{}) {
		t.Errorf("after Release: %+v, want zero", got)
	}
	// A Pick without an ID books nothing.
	if _, err := r.Pick(&Request{Hashes: h}, prefill); err != nil {
		t.Fatal(err)
	}
	if got := r.Load("p"); got != (Load{}) {
		t.Errorf("after a Pick without ID: %+v, want zero", got)
	}
}
