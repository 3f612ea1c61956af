package hf

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// idsFor derives a deterministic id list (1 to cacheIDMax ids) from a
// key, so a reader can tell a torn or mismatched entry from a right one.
func idsFor(key string) []uint32 {
	h := uint32(2166136261)
	for i := range len(key) {
		h = (h ^ uint32(key[i])) * 16777619
	}
	ids := make([]uint32, 1+int(h%cacheIDMax))
	for i := range ids {
		ids[i] = h + uint32(i)*0x9E3779B9
	}
	return ids
}

func TestPieceCacheRoundTrip(t *testing.T) {
	c := newPieceCache()
	var keys []string
	for n := 1; n <= cacheKeyMax; n++ {
		keys = append(keys, strings.Repeat("x", n-1)+"y", strings.Repeat("\x00", n))
	}
	for _, k := range keys {
		key := makeKey(k)
		if got, ok := c.get(nil, &key); ok {
			t.Fatalf("%q: hit %v in an empty cache", k, got)
		}
		c.put(&key, idsFor(k))
	}
	hits := 0
	for _, k := range keys {
		key := makeKey(k)
		got, ok := c.get([]uint32{7}, &key)
		if !ok {
			continue // replaced by a key that shares its slot
		}
		hits++
		if want := append([]uint32{7}, idsFor(k)...); !slices.Equal(got, want) {
			t.Errorf("%q: got %v, want %v", k, got, want)
		}
	}
	if hits < len(keys)*3/4 {
		t.Errorf("%d of %d keys hit; the slots collide far more than a hash should", hits, len(keys))
	}
	// Keys that pack to the same words differ by length: "\x00" and "\x00\x00".
	a, b := makeKey("\x00"), makeKey("\x00\x00")
	if a.w != b.w {
		t.Fatalf("test premise: %v and %v should pack alike", a.w, b.w)
	}
	c2 := newPieceCache()
	c2.put(&a, []uint32{1})
	if got, ok := c2.get(nil, &b); ok {
		t.Errorf("a 2-byte key hit the 1-byte key's entry: %v", got)
	}
}

// TestPieceCacheConcurrent: readers racing writers on colliding slots
// only ever see a key's own ids (run it with -race too).
func TestPieceCacheConcurrent(t *testing.T) {
	c := newPieceCache()
	keys := make([]string, 4*(1<<cacheBits)) // four keys per slot on average
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range keys {
		b := make([]byte, 1+rng.IntN(cacheKeyMax))
		for j := range b {
			b[j] = byte(rng.IntN(256))
		}
		keys[i] = string(b)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	hits, bad := 0, 0
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			buf := make([]uint32, 0, cacheIDMax)
			h, wrong := 0, 0
			for range 20000 {
				k := keys[rng.IntN(len(keys))]
				key := makeKey(k)
				got, ok := c.get(buf[:0], &key)
				if !ok {
					c.put(&key, idsFor(k))
					continue
				}
				h++
				if !slices.Equal(got, idsFor(k)) {
					wrong++
				}
			}
			mu.Lock()
			hits += h
			bad += wrong
			mu.Unlock()
		})
	}
	wg.Wait()
	if bad > 0 {
		t.Errorf("%d of %d hits returned another key's ids", bad, hits)
	}
	if hits == 0 {
		t.Error("no hits at all")
	}
}

// TestEncodeCacheExact: encoding with the piece cache, cold and warm,
// gives the ids of encoding without it.
func TestEncodeCacheExact(t *testing.T) {
	tk := tiny(t, false)
	plain := *tk
	plain.cache = nil
	rng := rand.New(rand.NewPCG(5, 6))
	words := []string{"hello", " hello", " world", "ab", " ab", "abab", "x"}
	for i := range 2000 {
		var text string
		if i%2 == 0 {
			text = genText(rng, []string{"<|end|>", "<|end|>x"})
		} else {
			var b strings.Builder
			for range 1 + rng.IntN(30) {
				b.WriteString(words[rng.IntN(len(words))])
			}
			text = b.String()
		}
		want := plain.Encode(text)
		for pass := range 2 {
			if got := tk.Encode(text); !slices.Equal(got, want) {
				t.Fatalf("pass %d on %q: got %v, want %v", pass, text, got, want)
			}
		}
	}
}

// TestEncodeAllocs: encoding valid NFC text into a buffer with room
// allocates nothing, cache hits and misses alike.
func TestEncodeAllocs(t *testing.T) {
	tk := tiny(t, false)
	text := strings.Repeat("hello world, abab x! ", 50) + "<|end|>"
	buf := tk.AppendEncode(nil, text)
	allocs := testing.AllocsPerRun(50, func() {
		clear(tk.cache.slots) // all misses
		buf = tk.AppendEncode(buf[:0], text)
	})
	if allocs != 0 {
		t.Errorf("cold AppendEncode allocates %.0f times per run, want 0", allocs)
	}
	allocs = testing.AllocsPerRun(50, func() { buf = tk.AppendEncode(buf[:0], text) })
	if allocs != 0 {
		t.Errorf("warm AppendEncode allocates %.0f times per run, want 0", allocs)
	}
}

// TestMergeHeapMatchesScan: the heap merge of long pieces gives the
// rescanning merge's tokens on every piece both can take.
func TestMergeHeapMatchesScan(t *testing.T) {
	tk := tiny(t, false)
	rng := rand.New(rand.NewPCG(7, 8))
	parts := []string{"h", "e", "l", "o", "he", "ll", "hello", " w", " world", "ld", "x"}
	for range 3000 {
		var b strings.Builder
		for b.Len() < 1+rng.IntN(scanMax) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		piece := b.String()[:min(b.Len(), scanMax)]
		scan, heap := tk.merge(nil, piece), tk.mergeHeap(nil, piece)
		if !slices.Equal(scan, heap) {
			t.Fatalf("%q: scan %v, heap %v", piece, scan, heap)
		}
	}
}
