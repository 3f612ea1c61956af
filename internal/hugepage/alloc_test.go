package hugepage

import (
	"testing"
	"unsafe"
)

func TestAlloc(t *testing.T) {
	for _, n := range []int{0, 1, 4096, Size - 1, Size, 3*Size + 100} {
		b, huge := Alloc(n)
		if len(b) != n || cap(b) != n {
			t.Errorf("Alloc(%d): len %d cap %d", n, len(b), cap(b))
		}
		if n >= Size && uintptr(unsafe.Pointer(&b[0]))%Size != 0 {
			t.Errorf("Alloc(%d) starts at %p, not on a huge page", n, &b[0])
		}
		if n < Size && huge {
			t.Errorf("Alloc(%d) reports huge pages below one page", n)
		}
		for i, v := range b {
			if v != 0 {
				t.Fatalf("Alloc(%d)[%d] = %d, want zeroed memory", n, i, v)
			}
		}
	}
}

// Arena allocations are zeroed, cache-line aligned and never overlap, in a
// chunk or on their own; small ones are plain allocations.
func TestArena(t *testing.T) {
	a := &Arena{ChunkSize: 1 << 20}
	type span struct{ lo, hi uintptr }
	var got []span
	for _, n := range []int{minArena, 100_000, 300_000, 300_000, 500_000, 2 << 20, minArena + 1} {
		b := a.Alloc(n)
		if len(b) < n {
			t.Fatalf("Alloc(%d) gave %d bytes", n, len(b))
		}
		lo := uintptr(unsafe.Pointer(&b[0]))
		if lo%lineSize != 0 {
			t.Errorf("Alloc(%d) at %#x: not cache-line aligned", n, lo)
		}
		for i, v := range b {
			if v != 0 {
				t.Fatalf("Alloc(%d)[%d] = %d, want zeroed memory", n, i, v)
			}
		}
		for i := range b {
			b[i] = 0xff // a later overlapping allocation would not be zeroed
		}
		s := span{lo, lo + uintptr(len(b))}
		for _, o := range got {
			if s.lo < o.hi && o.lo < s.hi {
				t.Errorf("Alloc(%d) [%#x, %#x) overlaps [%#x, %#x)", n, s.lo, s.hi, o.lo, o.hi)
			}
		}
		got = append(got, s)
	}
	if b := a.Alloc(100); len(b) != 100 {
		t.Errorf("small Alloc gave %d bytes", len(b))
	}
	type block struct {
		h    uint64
		a, b int32
	}
	s := Slice[block](a, 10_000)
	if len(s) != 10_000 || s[9_999] != (block{}) {
		t.Errorf("Slice: len %d, last %+v", len(s), s[len(s)-1])
	}
	if Slice[uint64](a, 0) != nil {
		t.Errorf("Slice of 0 is not nil")
	}
}
