package sim

import (
	"math/rand/v2"
	"testing"
)

// TestBlockTableMatchesMap drives the table and a Go map through the same
// random inserts and removals, full to capacity, and compares every
// lookup. Small tables make probe runs wrap around the end and collide.
func TestBlockTableMatchesMap(t *testing.T) {
	for _, tc := range []struct {
		name   string
		blocks int
		keys   uint64 // hashes are drawn from [1, keys]: small, so they repeat
		mul    uint64 // and spread by this, to vary their bits
	}{
		{"tiny", 3, 8, 1},
		{"small keys", 64, 200, 1},
		{"high bits", 64, 200, 1 << 40},
		{"hashed", 1000, 5000, 0x2545f4914f6cdd1d},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.blocks)))
			blocks := make([]block, tc.blocks)
			tab := newBlockTable(tc.blocks)
			want := map[uint64]int32{}
			var free []int32
			for i := range blocks {
				free = append(free, int32(i))
			}
			for op := range 20000 {
				h := (1 + rng.Uint64N(tc.keys)) * tc.mul
				if rng.IntN(2) == 0 && len(free) > 0 {
					i := free[len(free)-1]
					j, dup := tab.find(h, blocks)
					if _, wdup := want[h]; dup != wdup {
						t.Fatalf("op %d: find(%d) = %v, map says %v", op, h, dup, wdup)
					}
					if !dup {
						free = free[:len(free)-1]
						blocks[i].hash = h
						tab.setAt(j, h, i)
						want[h] = i
					}
				} else if i, ok := want[h]; ok {
					tab.remove(h, i)
					delete(want, h)
					free = append(free, i)
				} else {
					tab.remove(h, 0) // absent: ignored
				}
				if tab.len() != len(want) {
					t.Fatalf("op %d: len %d, want %d", op, tab.len(), len(want))
				}
				if op%97 == 0 {
					for k := uint64(1); k <= tc.keys; k++ {
						got, ok := tab.get(k*tc.mul, blocks)
						w, wok := want[k*tc.mul]
						if ok != wok || got != w {
							t.Fatalf("op %d: get(%d) = %d, %v; want %d, %v", op, k*tc.mul, got, ok, w, wok)
						}
					}
				}
			}
		})
	}
}
