package kvindex

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// tierModel is the reference: block → worker → tier mask (bit t = Tier t).
type tierModel map[uint64]map[string]uint8

func (m tierModel) overlaps(hashes []uint64, workers []string) map[string]string {
	out := map[string]string{}
	for _, w := range workers {
		var tc TierCounts
		n := 0
		for _, h := range hashes {
			mask := m[h][w]
			if mask == 0 {
				break
			}
			tc[bestTier(uint16(mask))]++
			n++
		}
		if n > 0 {
			out[w] = fmt.Sprint(n, tc)
		}
	}
	return out
}

func tierHits(o *Overlaps) map[string]string {
	out := make(map[string]string, len(o.Hits))
	for _, h := range o.Hits {
		out[h.Worker] = fmt.Sprint(h.Blocks, h.Tiers)
		if got := o.Tiers(h.ID); got != h.Tiers {
			out[h.Worker] += fmt.Sprintf(" (Tiers(id) = %v)", got)
		}
	}
	return out
}

func TestTierRoundTrip(t *testing.T) {
	c := chain(1, 6)
	tests := []struct {
		name  string
		setup func(x *Index)
		want  map[string]string
	}{
		{"gpu", func(x *Index) { x.Store("a", c) }, map[string]string{"a": "6 [6 0 0]"}},
		{"offload: gpu removed, cpu stored", func(x *Index) {
			x.Store("a", c)
			x.RemoveTier("a", TierGPU, c[3:])
			x.StoreTier("a", TierCPU, c[3:])
		}, map[string]string{"a": "6 [3 3 0]"}},
		{"removing a tier the block is not in keeps it", func(x *Index) {
			x.Store("a", c)
			x.RemoveTier("a", TierCPU, c)
		}, map[string]string{"a": "6 [6 0 0]"}},
		{"held in two tiers counts as the faster", func(x *Index) {
			x.StoreTier("a", TierCPU, c)
			x.StoreTier("a", TierGPU, c[:2])
		}, map[string]string{"a": "6 [2 4 0]"}},
		{"gpu copy dropped, cpu copy stays", func(x *Index) {
			x.StoreTier("a", TierCPU, c)
			x.StoreTier("a", TierGPU, c)
			x.RemoveTier("a", TierGPU, c)
		}, map[string]string{"a": "6 [0 6 0]"}},
		{"unknown tier is the slowest", func(x *Index) {
			x.StoreTier("a", Tier(9), c)
			x.RemoveTier("a", TierDisk, c[4:])
		}, map[string]string{"a": "4 [0 0 4]"}},
		{"several holders in mixed tiers", func(x *Index) {
			for i, w := range []string{"a", "b", "c", "d", "e"} {
				x.StoreTier(w, Tier(i%3), c[:i+2])
			}
		}, map[string]string{"a": "2 [2 0 0]", "b": "3 [0 3 0]", "c": "4 [0 0 4]", "d": "5 [5 0 0]", "e": "6 [0 6 0]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := New(Config{Shards: 2, InitialSlots: 8})
			tc.setup(x)
			var o Overlaps
			x.Overlaps(c, &o)
			if got := tierHits(&o); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("overlaps = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTiersEntriesCountOnce(t *testing.T) {
	x := New(Config{})
	c := chain(2, 4)
	x.StoreTier("a", TierGPU, c)
	x.StoreTier("a", TierCPU, c)
	if got := x.Entries(); got != 4 {
		t.Errorf("Entries after storing in two tiers = %d, want 4", got)
	}
	x.RemoveTier("a", TierGPU, c)
	if got := x.WorkerBlocks("a"); got != 4 {
		t.Errorf("WorkerBlocks after the gpu copies went = %d, want 4", got)
	}
	x.RemoveTier("a", TierCPU, c)
	if got := x.Entries(); got != 0 {
		t.Errorf("Entries after both tiers went = %d, want 0", got)
	}
}

// TestTiersAgainstModel drives random tiered stores and removes over enough
// workers that every lookup path runs: the one-holder run, three-lane heads,
// small and stamped large intersections.
func TestTiersAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 3))
	x := New(Config{Shards: 2, InitialSlots: 8})
	m := tierModel{}
	workers := make([]string, 30)
	for i := range workers {
		workers[i] = fmt.Sprintf("w%02d", i)
	}
	chains := make([][]uint64, 4)
	for i := range chains {
		chains[i] = chain(uint64(200+i), 30)
	}
	chains[1] = append(append([]uint64{}, chains[0][:12]...), chains[1][12:]...)
	var o Overlaps
	for step := 0; step < 6000; step++ {
		// Few workers early on (one-holder runs), all of them later.
		w := workers[rng.IntN(min(len(workers), 1+step/100))]
		c := chains[rng.IntN(len(chains))]
		lo := rng.IntN(len(c))
		hi := lo + 1 + rng.IntN(len(c)-lo)
		tier := Tier(rng.IntN(4)) // 3 is unknown: the slowest
		bit := uint8(1) << min(tier, TierDisk)
		switch r := rng.IntN(100); {
		case r < 60:
			x.StoreTier(w, tier, c[lo:hi])
			for _, h := range c[lo:hi] {
				if m[h] == nil {
					m[h] = map[string]uint8{}
				}
				m[h][w] |= bit
			}
		case r < 97:
			x.RemoveTier(w, tier, c[lo:hi])
			for _, h := range c[lo:hi] {
				if m[h][w]&^bit == 0 {
					delete(m[h], w)
				} else {
					m[h][w] &^= bit
				}
			}
		default:
			x.Clear(w)
			for _, s := range m {
				delete(s, w)
			}
		}
		q := chains[rng.IntN(len(chains))]
		x.Overlaps(q, &o)
		if got, want := tierHits(&o), m.overlaps(q, workers); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("step %d: overlaps = %v, want %v", step, got, want)
		}
		entries := 0
		for _, s := range m {
			entries += len(s)
		}
		if got := x.Entries(); got != entries {
			t.Fatalf("step %d: Entries = %d, want %d", step, got, entries)
		}
		var want [NumTiers]int
		for _, s := range m {
			for tr := range NumTiers {
				if s[w]&(1<<tr) != 0 {
					want[tr]++
				}
			}
		}
		if got := x.WorkerTierBlocks(w); got != want {
			t.Fatalf("step %d: WorkerTierBlocks(%s) = %v, want %v", step, w, got, want)
		}
	}
}
