package hugepage

import (
	"sync"
	"unsafe"
)

// Size is the transparent huge page size on amd64 and on arm64 with 4 KiB
// base pages.
const Size = 2 << 20

// Alloc returns n zeroed bytes starting on a 2 MiB boundary, advised for
// huge pages, inside a Go allocation one huge page larger (the pad is
// address space, untouched unless the allocator reused and zeroed memory),
// and whether the kernel took the advice. Below one huge page it is a plain
// make: nothing to gain. The caller must store no Go pointers in the memory
// (the collector does not scan it).
func Alloc(n int) (b []byte, huge bool) {
	if n < Size {
		return make([]byte, n), false
	}
	raw := make([]byte, n+Size)
	off := 0
	if rem := int(uintptr(unsafe.Pointer(&raw[0])) % Size); rem != 0 {
		off = Size - rem
	}
	b = raw[off : off+n : off+n]
	return b, Advise(b)
}

// Arena hands out zeroed, pointer-free memory carved from Alloc chunks, for
// many tables of a few hundred KiB to a few MiB that live about as long as
// each other (a simulation's thousand KV caches). A chunk is freed when
// nothing carved from it is referenced. The zero value is ready to use; it
// is safe for concurrent use.
type Arena struct {
	// ChunkSize is the size of each chunk; 0 means 64 MiB. An allocation
	// larger than a chunk gets one of its own.
	ChunkSize int

	mu    sync.Mutex
	chunk []byte // what is left of the current chunk
}

// defaultChunk keeps the pad small next to the chunk (3%) and holds 46 of
// the 1.4 MiB block managers a 1,000-worker llama-3.1-8b simulation makes.
const defaultChunk = 64 << 20

// lineSize aligns every allocation to a cache line, so a table's first
// entries do not share a line with the previous table's last.
const lineSize = 64

// minArena is the smallest allocation an Arena carves: smaller ones gain
// little from huge pages and would each keep a chunk alive.
const minArena = 64 << 10

// Alloc returns n zeroed bytes aligned to a cache line. Memory is never
// handed out twice: a caller that lets go of it leaves a hole until its
// whole chunk is unreferenced. Below 64 KiB it is a plain make.
func (a *Arena) Alloc(n int) []byte {
	if n < minArena {
		return make([]byte, n)
	}
	size := a.ChunkSize
	if size <= 0 {
		size = defaultChunk
	}
	n = (n + lineSize - 1) &^ (lineSize - 1)
	if n >= size {
		b, _ := Alloc(n)
		return b
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.chunk) < n {
		a.chunk, _ = Alloc(size)
	}
	b := a.chunk[:n:n]
	a.chunk = a.chunk[n:]
	return b
}

// Slice returns n zeroed values of T from a.Alloc. T must hold no Go
// pointers (the collector does not scan arena memory) and be aligned to at
// most 8 bytes (a plain make of bytes guarantees no more).
func Slice[T any](a *Arena, n int) []T {
	if n == 0 {
		return nil
	}
	var zero T
	b := a.Alloc(n * int(unsafe.Sizeof(zero)))
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}
