package router

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestApproxMatchesMap: the open-addressed approximate index gives the
// answers of the map-and-ring one it replaced (refApprox) through random
// records (repeats, late decisions, evictions at capacity, table growth),
// lookups and forgotten workers.
func TestApproxMatchesMap(t *testing.T) {
	for _, tc := range []struct {
		capacity, universe int
	}{{100, 300}, {1000, 800}, {5000, 20000}} {
		rng := rand.New(rand.NewPCG(uint64(tc.capacity), 7))
		a, ref := newApprox(time.Minute, tc.capacity), newRefApprox(time.Minute, tc.capacity)
		workers := []string{"a", "b", "c"}
		base := time.Unix(1e9, 0)
		clock := 0
		prompt := func() []uint64 {
			h := make([]uint64, 1+rng.IntN(40))
			start := rng.IntN(tc.universe)
			for i := range h {
				// Hashes from a small universe repeat; a few collide
				// in their home slot's low bits on purpose.
				h[i] = uint64(start+i)%uint64(tc.universe)<<20 | uint64(i&3)
			}
			return h
		}
		for op := range 20000 {
			clock += rng.IntN(3)
			now := base.Add(time.Duration(clock) * time.Second)
			switch r := rng.IntN(100); {
			case r < 50:
				at := now
				if rng.IntN(10) == 0 {
					at = now.Add(-time.Duration(rng.IntN(5)) * time.Second) // a late decision
				}
				w, h := workers[rng.IntN(len(workers))], prompt()
				a.record(w, h, at)
				ref.record(w, h, at)
			case r < 99:
				w, h := workers[rng.IntN(len(workers))], prompt()
				if got, want := a.overlap(w, h, now), ref.overlap(w, h, now); got != want {
					t.Fatalf("capacity %d, op %d: overlap(%s, %d hashes) = %d, want %d", tc.capacity, op, w, len(h), got, want)
				}
			default:
				w := workers[rng.IntN(len(workers))]
				a.forget(w)
				ref.forget(w)
			}
			if got, want := a.len(), ref.len(); got != want {
				t.Fatalf("capacity %d, op %d: len %d, want %d", tc.capacity, op, got, want)
			}
		}
		if a.len() == 0 {
			t.Fatalf("capacity %d: nothing recorded", tc.capacity)
		}
	}
}

// TestApproxTableRemove: removing from the middle of a probe run keeps
// every other entry of the run (and of runs that wrap the table's end)
// reachable.
func TestApproxTableRemove(t *testing.T) {
	tb := newApproxTable(16, 0)
	// Hashes that share a home: their mixed top bits are equal.
	var same []uint64
	for h := uint64(1); len(same) < 6; h++ {
		if tb.home(h) == 15 {
			same = append(same, h)
		}
	}
	for i, h := range same {
		j, found := tb.find(h)
		if found {
			t.Fatalf("hash %d found before it was added", h)
		}
		tb.slots[j] = approxSlot{hash: h, worker: 1, seq: uint32(i)}
		tb.used++
	}
	for k := range same {
		i, ok := tb.find(same[k])
		if !ok {
			t.Fatalf("hash %d lost before its removal", same[k])
		}
		tb.remove(i)
		if _, ok := tb.find(same[k]); ok {
			t.Fatalf("hash %d still found after removal", same[k])
		}
		for _, h := range same[k+1:] {
			if _, ok := tb.find(h); !ok {
				t.Fatalf("removing %d lost %d", same[k], h)
			}
		}
	}
	if tb.used != 0 {
		t.Errorf("used = %d after removing everything", tb.used)
	}
}
