package sim

import (
	"math/bits"
	"sync"
	"unsafe"
)

// Buffers of finished sequences, recycled through Core.Recycle: the token
// buffer, the block-hash list and the block list.
//
// Why: a sequence's token buffer holds its prompt and room for every output
// token, 60 KB for an average Mooncake request, and its hash and block lists
// hold one entry per block of that (4.4 and 2.2 KB). `switchyard simulate`
// adds a million of them; allocating, zeroing and faulting in a fresh token
// buffer for each took 13% of a 1,000-worker run's CPU and made most of its
// garbage, and copying the prompt's hashes into a fresh list 5% (the
// profile of the 39,930-request run). The pools are shared by every core in
// the process (a simulation runs hundreds); a live engine never recycles,
// so its pools stay empty.
//
// A buffer is pooled by its capacity rounded down to a size class and taken
// by the request's need rounded up, so any buffer in a class fits every
// need of that class; new buffers get their class's capacity. Classes are
// quarter octaves: at most 25% slack.
// sync.Pool empties itself over two garbage collections, which bounds what
// the pools hold.

// minPooledBytes is the smallest buffer worth pooling: smaller ones are
// cheap to allocate.
const minPooledBytes = 4 << 10

// bufPool pools []T buffers by size class.
type bufPool[T any] [64 * 4]sync.Pool // *[]T, by class

var (
	tokenPool bufPool[uint32]
	hashPool  bufPool[uint64]
	blockPool bufPool[int32]
)

// minPooled is the smallest capacity, in elements, that p pools.
func (p *bufPool[T]) minPooled() int {
	var zero T
	return minPooledBytes / int(unsafe.Sizeof(zero))
}

// classOf returns the class of a capacity n >= 4: c with
// classCap(c) <= n < classCap(c+1).
func classOf(n int) int {
	k := bits.Len(uint(n)) - 1 // 2^k <= n < 2^(k+1)
	q := (n - 1<<k) >> (k - 2) // quarter of the octave, 0..3
	return k*4 + q
}

// classCap is the smallest capacity of class c.
func classCap(c int) int {
	k, q := c/4, c%4
	return 1<<k + q<<(k-2)
}

// take returns an empty buffer with room for n elements, recycled when one
// is pooled.
func (p *bufPool[T]) take(n int) []T {
	if n < p.minPooled() {
		return make([]T, 0, n)
	}
	c := classOf(n)
	if classCap(c) < n {
		c++
	}
	if v, ok := p[c].Get().(*[]T); ok {
		return (*v)[:0]
	}
	// The class's full capacity, so that the buffer pools back into the
	// class it serves.
	return make([]T, 0, classCap(c))
}

// put pools b for take.
func (p *bufPool[T]) put(b []T) {
	if cap(b) < p.minPooled() {
		return
	}
	p[classOf(cap(b))].Put(&b)
}

// Recycle hands back the buffers of a finished sequence: the caller has
// read its Result (which copies the output) and will not use h again.
// Handles of unfinished sequences are ignored.
func (c *Core) Recycle(h Handle) {
	s := h.s
	if s == nil || s.state != stateDone || s.tokens == nil {
		return
	}
	tokenPool.put(s.tokens)
	hashPool.put(s.hashes)
	blockPool.put(s.blocks)
	s.tokens, s.hashes, s.blocks = nil, nil, nil
}
