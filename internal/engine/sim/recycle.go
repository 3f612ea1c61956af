package sim

import (
	"math/bits"
	"sync"
)

// Token buffers of finished sequences, recycled through Core.Recycle.
//
// Why: a sequence's token buffer holds its prompt and room for every output
// token, 60 KB for an average Mooncake request. `switchyard simulate` adds a
// million of them; allocating, zeroing and faulting in a fresh one for each
// took 13% of a 1,000-worker run's CPU and made most of its garbage. The
// pools are shared by every core in the process (a simulation runs
// hundreds); a live engine never recycles, so its pools stay empty.
//
// A buffer is pooled by its capacity rounded down to a size class and taken
// by the request's need rounded up, so any buffer in a class fits every
// need of that class; new buffers get their class's capacity. Classes are
// quarter octaves: at most 25% slack.
// sync.Pool empties itself over two garbage collections, which bounds what
// the pools hold.

// minPooled is the smallest buffer worth pooling, in tokens: smaller ones
// are cheap to allocate.
const minPooled = 1024

var tokenPools [64 * 4]sync.Pool // *[]uint32, by class

// classOf returns the class of a capacity n >= minPooled: c with
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

// takeTokens returns an empty buffer with room for n tokens, recycled when
// one is pooled.
func takeTokens(n int) []uint32 {
	if n < minPooled {
		return make([]uint32, 0, n)
	}
	c := classOf(n)
	if classCap(c) < n {
		c++
	}
	if v, ok := tokenPools[c].Get().(*[]uint32); ok {
		return (*v)[:0]
	}
	// The class's full capacity, so that the buffer pools back into the
	// class it serves.
	return make([]uint32, 0, classCap(c))
}

// putTokens pools b for takeTokens.
func putTokens(b []uint32) {
	if cap(b) < minPooled {
		return
	}
	tokenPools[classOf(cap(b))].Put(&b)
}

// Recycle hands back the token buffer of a finished sequence: the caller has
// read its Result (which copies the output) and will not use h again.
// Handles of unfinished sequences are ignored.
func (c *Core) Recycle(h Handle) {
	s := h.s
	if s == nil || s.state != stateDone || s.tokens == nil {
		return
	}
	putTokens(s.tokens)
	s.tokens = nil
}
