package mergeheap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestHeapOrder: pops come out by rank, then position, whether the heap
// was built by Init or by Push.
func TestHeapOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, useInit := range []bool{true, false} {
		var h Heap
		var all []Cand
		for i := range 500 {
			c := Cand{Rank: uint32(rng.IntN(50)), Pos: i}
			all = append(all, c)
			if useInit {
				h = append(h, c)
			} else {
				h.Push(c)
			}
		}
		if useInit {
			h.Init()
		}
		slices.SortFunc(all, func(a, b Cand) int {
			if a.Rank != b.Rank {
				return int(a.Rank) - int(b.Rank)
			}
			return a.Pos - b.Pos
		})
		for i, want := range all {
			if got := h.Pop(); got != want {
				t.Fatalf("init %v: pop %d = %+v, want %+v", useInit, i, got, want)
			}
		}
		if len(h) != 0 {
			t.Errorf("init %v: %d left", useInit, len(h))
		}
	}
}

func TestScratchReset(t *testing.T) {
	s := Get(8)
	s.Next[3], s.Prev[5] = 99, 99
	s.Heap.Push(Cand{Rank: 1})
	Put(s)
	s = Get(6)
	defer Put(s)
	for i := range 6 {
		if s.Next[i] != i+1 || s.Prev[i] != i-1 {
			t.Fatalf("symbol %d: next %d prev %d", i, s.Next[i], s.Prev[i])
		}
	}
	if len(s.Next) != 6 || len(s.Sym) != 6 || len(s.Heap) != 0 {
		t.Errorf("lengths %d %d, heap %d", len(s.Next), len(s.Sym), len(s.Heap))
	}
}
