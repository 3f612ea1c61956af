package router

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

// TestPickCachedLookupsEqualFresh drives two routers through the same random
// history (requests started, decoding and finished, load reports fresh and
// stale, workers forgotten, blocks stored and removed, workers dropped from
// and re-registered in the index, candidate sets changing) and checks that
// the one reusing its candidates' lookups across Picks decides exactly as
// the one looking every candidate up by name on every Pick.
func TestPickCachedLookupsEqualFresh(t *testing.T) {
	for _, policy := range []string{PolicyKV, PolicyLeastLoaded, PolicyRoundRobin} {
		t.Run(policy, func(t *testing.T) {
			idx := kvindex.New(kvindex.Config{Shards: 4})
			cached, clk := newTestRouter(t, Config{Index: idx, Policy: policy, NoApprox: true})
			fresh, err := New(Config{Index: idx, Policy: policy, NoApprox: true, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			fresh.freshLookups = true
			rng := rand.New(rand.NewPCG(7, 11))
			const nw = 40
			names := make([]string, nw)
			for i := range names {
				names[i] = fmt.Sprintf("w%d", i)
			}
			all := make([]Worker, nw)
			for i := range all {
				all[i] = Worker{ID: names[i], EventsHealthy: true}
			}
			cands := all
			chains := make([][]uint64, 12)
			for i := range chains {
				chains[i] = hashes(i, 30)
			}
			type live struct{ worker, id string }
			var inflight []live
			both := func(f func(r *Router)) { f(cached); f(fresh) }
			for op := range 6000 {
				switch k := rng.IntN(100); {
				case k < 30:
					h := chains[rng.IntN(len(chains))][:1+rng.IntN(30)]
					req := &Request{Hashes: h, PromptTokens: len(h) * 4, BlockSize: 4}
					a, errA := cached.Pick(req, cands)
					b, errB := fresh.Pick(req, cands)
					if a != b || (errA == nil) != (errB == nil) {
						t.Fatalf("op %d: cached lookups picked %+v (%v), fresh %+v (%v)", op, a, errA, b, errB)
					}
					if errA == nil {
						id := fmt.Sprint("r", op)
						both(func(r *Router) { r.Started(a.Worker, id, len(h)-a.OverlapBlocks, len(h)) })
						inflight = append(inflight, live{a.Worker, id})
					}
				case k < 42 && len(inflight) > 0:
					q := inflight[rng.IntN(len(inflight))]
					both(func(r *Router) { r.FirstToken(q.worker, q.id) })
				case k < 55 && len(inflight) > 0:
					i := rng.IntN(len(inflight))
					q := inflight[i]
					both(func(r *Router) { r.Finished(q.worker, q.id) })
					inflight = append(inflight[:i], inflight[i+1:]...)
				case k < 65:
					w := names[rng.IntN(nw)]
					rep := LoadReport{QueuedPrefillBlocks: rng.IntN(50), ActiveDecodeBlocks: rng.IntN(80), Running: rng.IntN(4), Waiting: rng.IntN(3), TakenAt: clk.Now()}
					both(func(r *Router) { r.ObserveLoad(w, rep) })
				case k < 75:
					idx.Store(names[rng.IntN(nw)], chains[rng.IntN(len(chains))][:1+rng.IntN(30)])
				case k < 80:
					idx.Remove(names[rng.IntN(nw)], chains[rng.IntN(len(chains))][rng.IntN(10):])
				case k < 82:
					idx.DropWorker(names[rng.IntN(nw)])
				case k < 84:
					w := names[rng.IntN(nw)]
					both(func(r *Router) { r.Forget(w) })
				case k < 87:
					// Another candidate set: a pool without some workers,
					// or everyone again.
					if rng.IntN(2) == 0 {
						cands = all
					} else {
						lo := rng.IntN(nw / 2)
						cands = all[lo : lo+nw/2]
					}
				default:
					clk.Advance(time.Duration(rng.IntN(400)) * time.Millisecond)
				}
			}
		})
	}
}
