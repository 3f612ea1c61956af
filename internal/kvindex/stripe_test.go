package kvindex

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// TestStripeSplitEqualsOrdered: a list of stores and removals from many
// workers, split by Stripe into two parts applied concurrently, or one part
// after the other (each stripe's writes in the list's order, the workers
// registered first in the order of their first store), leaves every shard's table slot for slot, and every
// counter, as applying the list in order does. Small tables make them grow
// and blocks shared by many workers make holder sets spill into
// continuation slots.
func TestStripeSplitEqualsOrdered(t *testing.T) {
	type write struct {
		worker string
		store  bool
		tier   Tier
		hashes []uint64
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var writes []write
	for i := range 3000 {
		w := fmt.Sprintf("w%d", rng.IntN(40))
		c := chain(uint64(rng.IntN(30)), 1+rng.IntN(24))
		lo := rng.IntN(len(c))
		writes = append(writes, write{w, i%4 != 3, Tier(rng.IntN(2)), c[lo:]})
	}
	cfg := Config{Shards: 16, InitialSlots: 8}
	ordered := New(cfg)
	for _, w := range writes {
		if w.store {
			ordered.StoreTier(w.worker, w.tier, w.hashes)
		} else {
			ordered.RemoveTier(w.worker, w.tier, w.hashes)
		}
	}
	const parts = 2
	// apply applies part's share of the writes, skipping writes with no
	// block in its stripes.
	apply := func(x *Index, part int) {
		for _, w := range writes {
			var h []uint64
			for _, b := range w.hashes {
				if x.Stripe(b)%parts == part {
					h = append(h, b)
				}
			}
			switch {
			case len(h) == 0:
			case w.store:
				x.StoreTier(w.worker, w.tier, h)
			default:
				x.RemoveTier(w.worker, w.tier, h)
			}
		}
	}
	for _, schedule := range []string{"concurrent", "part 1 then part 0"} {
		t.Run(schedule, func(t *testing.T) {
			split := New(cfg)
			for _, w := range writes {
				if _, ok := split.ID(w.worker); w.store && !ok {
					split.StoreTier(w.worker, w.tier, nil)
				}
			}
			if schedule == "concurrent" {
				var wg sync.WaitGroup
				for part := range parts {
					wg.Go(func() { apply(split, part) })
				}
				wg.Wait()
			} else {
				apply(split, 1)
				apply(split, 0)
			}
			sameIndex(t, ordered, split)
		})
	}
}

// sameIndex fails unless a and b hold the same tables slot for slot, the
// same counters and the same worker IDs.
func sameIndex(t *testing.T, a, b *Index) {
	t.Helper()
	if b.Stripes() != 16 {
		t.Fatalf("Stripes() = %d, want 16", b.Stripes())
	}
	grown := false
	for i := range a.shards {
		sa, sb := &a.shards[i], &b.shards[i]
		ta, tb := sa.tab.Load(), sb.tab.Load()
		grown = grown || len(ta.slots) > 8
		if sa.used != sb.used || sa.pairs.Load() != sb.pairs.Load() || !slices.Equal(ta.slots, tb.slots) {
			t.Errorf("shard %d differs: used %d/%d, pairs %d/%d, %d/%d slots", i, sa.used, sb.used, sa.pairs.Load(), sb.pairs.Load(), len(ta.slots), len(tb.slots))
		}
	}
	if !grown {
		t.Errorf("no table grew: the test does not exercise growth")
	}
	for i := range 40 {
		w := fmt.Sprintf("w%d", i)
		ia, _ := a.ID(w)
		ib, _ := b.ID(w)
		if ia != ib || a.WorkerTierBlocks(w) != b.WorkerTierBlocks(w) {
			t.Errorf("%s: ID %d/%d, tier blocks %v/%v", w, ia, ib, a.WorkerTierBlocks(w), b.WorkerTierBlocks(w))
		}
	}
}
