package router

import (
	"testing"
	"time"
)

// TestApproxGrowsThenEvictsOldest: the ring grows lazily but still evicts
// in insertion order once it reaches its bound.
func TestApproxGrowsThenEvictsOldest(t *testing.T) {
	a := newApprox(time.Hour, 2000)
	if len(a.ring) != approxInitialRing {
		t.Fatalf("initial ring %d, want %d", len(a.ring), approxInitialRing)
	}
	now := time.Unix(1000, 0)
	hashes := make([]uint64, 3000)
	for i := range hashes {
		hashes[i] = uint64(i + 1)
	}
	a.record("w", hashes, now)
	if got := a.len(); got != 2000 {
		t.Errorf("records = %d, want the capacity 2000", got)
	}
	if got := a.overlap("w", hashes[:1], now); got != 0 {
		t.Errorf("oldest hash still credited")
	}
	if got := a.overlap("w", hashes[1000:], now); got != 2000 {
		t.Errorf("newest 2000 hashes credited %d, want 2000", got)
	}
}
