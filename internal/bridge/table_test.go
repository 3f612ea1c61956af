package bridge

import (
	"math/rand/v2"
	"testing"
)

// The table against a Go map under random puts and deletes, with keys
// crowded into few home slots so runs wrap and shift.
func TestTableModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var tb table
	ref := map[uint64]uint64{}
	for op := 0; op < 200000; op++ {
		k := uint64(rng.IntN(3000))
		if rng.IntN(50) == 0 {
			k = 0
		}
		switch rng.IntN(3) {
		case 0, 1:
			v := rng.Uint64()
			tb.Put(k, v)
			ref[k] = v
		case 2:
			tb.Delete(k)
			delete(ref, k)
		}
		if op%997 == 0 {
			if tb.Len() != len(ref) {
				t.Fatalf("op %d: len %d, want %d", op, tb.Len(), len(ref))
			}
			for k, v := range ref {
				if got, ok := tb.Get(k); !ok || got != v {
					t.Fatalf("op %d: get %d = %d %v, want %d", op, k, got, ok, v)
				}
			}
			n := 0
			tb.Range(func(k, v uint64) {
				n++
				if ref[k] != v {
					t.Fatalf("range gave %d=%d, want %d", k, v, ref[k])
				}
			})
			if n != len(ref) {
				t.Fatalf("range saw %d, want %d", n, len(ref))
			}
		}
	}
	for k := range uint64(3000) {
		if _, ok := ref[k]; !ok {
			if _, ok := tb.Get(k); ok {
				t.Fatalf("deleted key %d still found", k)
			}
		}
	}
}
