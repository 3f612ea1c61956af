package kvindex

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestRunAgainstModel drives tiered stores and removes of long prefixes by
// up to eight workers, so lookups spend most blocks in matchRun with one to
// six alive workers and leave it for every reason it has: a worker's prefix
// ends, a set outgrows six holders, a tier changes mid-chain (new head
// value), and a head or continuation sits past its home line (one shard
// kept between 3/8 and 3/4 full, and one chain whose hashes share 32 home
// lines, so its probe runs span many lines).
func TestRunAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 5))
	x := New(Config{Shards: 1, InitialSlots: 8})
	// The model: block → tier mask (bit t = Tier t) by worker index. Arrays,
	// not tierModel's maps, keep the test fast under -race.
	m := map[uint64]*[8]uint8{}
	workers := make([]string, 8)
	for i := range workers {
		workers[i] = fmt.Sprintf("w%d", i)
	}
	chains := make([][]uint64, 4)
	for i := range chains {
		chains[i] = chain(uint64(300+i), 256)
	}
	chains[1] = append(append([]uint64{}, chains[0][:128]...), chains[1][128:]...)
	for i := range chains[3] {
		chains[3][i] = uint64(i+1)<<40 | uint64(i%32)<<4 // 32 home lines in any table
	}
	var o Overlaps
	for step := 0; step < 1200; step++ {
		w := rng.IntN(len(workers))
		c := chains[rng.IntN(len(chains))]
		lo := 0
		if rng.IntN(4) == 0 {
			lo = rng.IntN(len(c))
		}
		hi := lo + 1 + rng.IntN(len(c)-lo)
		tier := Tier(rng.IntN(3))
		bit := uint8(1) << tier
		store := rng.IntN(100) < 65
		if store {
			x.StoreTier(workers[w], tier, c[lo:hi])
		} else {
			x.RemoveTier(workers[w], tier, c[lo:hi])
		}
		for _, h := range c[lo:hi] {
			if m[h] == nil {
				m[h] = new([8]uint8)
			}
			if store {
				m[h][w] |= bit
			} else {
				m[h][w] &^= bit
			}
		}
		q := chains[rng.IntN(len(chains))]
		x.Overlaps(q, &o)
		var want [8]struct {
			n     int
			tiers TierCounts
			out   bool // prefix ended
		}
		for _, h := range q {
			masks := m[h]
			if masks == nil {
				masks = new([8]uint8)
			}
			for i := range want {
				if mask := masks[i]; !want[i].out && mask != 0 {
					want[i].n++
					want[i].tiers[bestTier(uint16(mask))]++
				} else {
					want[i].out = true
				}
			}
		}
		wantHits := map[string]string{}
		for i, wi := range want {
			if wi.n > 0 {
				wantHits[workers[i]] = fmt.Sprint(wi.n, wi.tiers)
			}
		}
		if got := tierHits(&o); fmt.Sprint(got) != fmt.Sprint(wantHits) {
			t.Fatalf("step %d: overlaps = %v, want %v", step, got, wantHits)
		}
	}
}

// TestProbeOnReplacedTable pins that a block found past the line after its
// home line is read only from the table the prefetched lines belong to: once
// a grow has replaced that table, probeOn reports nothing (the walk then
// rereads the block) rather than mix the two tables' states.
func TestProbeOnReplacedTable(t *testing.T) {
	x := New(Config{Shards: 1, InitialSlots: 64})
	hashes := make([]uint64, 12)
	for i := range hashes {
		hashes[i] = uint64(i+1)<<40 | 0x10 // one home line: a probe run of three lines
	}
	x.Store("a", hashes)
	k := slotKey(hashes[11]) // two lines past its home line
	s := &x.shards[0]
	l := s.tab.Load().lineOf(k)
	if got := x.probeOn(s, l, k); got>>48 != 1 {
		t.Fatalf("probeOn before the grow = %#x, want a one-holder head", got)
	}
	for i := range 64 { // grow the table
		x.Store("a", []uint64{Mix(uint64(i) + 99)})
	}
	if s.tab.Load().lineOf(k) == l {
		t.Fatal("the table did not grow")
	}
	if got := x.probeOn(s, l, k); got != 0 {
		t.Errorf("probeOn with a replaced table's line = %#x, want 0", got)
	}
	var o Overlaps
	x.Overlaps(hashes, &o)
	if got, want := fmt.Sprint(hitsMap(&o)), "map[a:12]"; got != want {
		t.Errorf("overlaps after the grow = %s, want %s", got, want)
	}
}
