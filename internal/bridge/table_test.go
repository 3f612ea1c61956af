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

// Keys spread over the whole range, so shards grow well past their first
// size while keys come and go.
func TestTableModelGrowing(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var tb table
	ref := map[uint64]uint64{}
	var keys []uint64
	for op := 0; op < 120000; op++ {
		if len(keys) == 0 || rng.IntN(4) != 0 {
			k, v := rng.Uint64(), rng.Uint64()
			tb.Put(k, v)
			ref[k] = v
			keys = append(keys, k)
		} else {
			j := rng.IntN(len(keys))
			tb.Delete(keys[j])
			delete(ref, keys[j])
			keys[j] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
		}
	}
	if tb.Len() != len(ref) {
		t.Fatalf("len %d, want %d", tb.Len(), len(ref))
	}
	for k, v := range ref {
		if got, ok := tb.Get(k); !ok || got != v {
			t.Fatalf("get %d = %d %v, want %d", k, got, ok, v)
		}
	}
}

// Growth keeps every shard between 7/10 and 7/8 full, so the table is
// never much larger than its keys need; a reserved table does not grow.
func TestTableSize(t *testing.T) {
	const n = 300000
	rng := rand.New(rand.NewPCG(11, 12))
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = rng.Uint64() | 1
	}
	var grown table
	for _, k := range keys {
		grown.Put(k, k)
	}
	need := n * 16 * 8 / 7
	if got := grown.Bytes(); got < need || got > need*5/4+numShards*16 {
		t.Errorf("grown table takes %d bytes for %d keys, want %d to %d", got, n, need, need*5/4+numShards*16)
	}
	largest := 0
	for i := range grown.shards {
		largest = max(largest, len(grown.shards[i].slots))
	}
	if mean := need / 16 / numShards; largest > mean*3/2 {
		t.Errorf("largest shard has %d slots, want at most 1.5 × the mean %d: growth would allocate large blocks", largest, mean)
	}

	var reserved table
	reserved.Reserve(n)
	before := reserved.Bytes()
	sizes := make([]int, numShards)
	for i := range reserved.shards {
		sizes[i] = len(reserved.shards[i].slots)
	}
	for _, k := range keys {
		reserved.Put(k, k)
	}
	grew := 0
	for i := range reserved.shards {
		if len(reserved.shards[i].slots) != sizes[i] {
			grew++
		}
	}
	// Room for two standard deviations over the mean: about 2% of shards
	// fill and grow.
	if grew > numShards/16 {
		t.Errorf("%d of %d shards of a table reserved for %d keys grew while taking them, want at most %d", grew, numShards, n, numShards/16)
	}
	// Two standard deviations of 1,172 keys a shard are 6% over the mean.
	if got, limit := before, need*108/100; got > limit {
		t.Errorf("table reserved for %d keys takes %d bytes, want at most %d (8%% over 7/8 full)", n, got, limit)
	}
}
