package hf

import (
	"math/bits"
	"sync/atomic"
)

// pieceCache remembers the ids of recently encoded pieces, so that a word
// seen before costs one hash and one cache line instead of a vocabulary
// lookup and a merge loop: most pieces of English text repeat (the
// 1,500-word benchmark prompt has ~1,500 pieces and fewer than 200
// distinct ones). BPE of a piece depends on its bytes alone, so a hit is
// exact by construction; the oracle tests run with the cache on.
//
// It is direct-mapped and bounded: a slot holds one piece of up to
// cacheKeyMax bytes and up to cacheIDMax ids, and a new piece that hashes
// to a taken slot replaces it. Longer pieces are not cached.
//
// Safe for concurrent use without locks: each slot is a seqlock over
// atomic words. A writer makes the slot's sequence odd (by CAS, so one
// writer at a time; a writer that loses skips the store), writes, and
// makes it even again; a reader takes the data only if it saw the same
// even sequence before and after reading it. Hits allocate nothing, and
// nor do stores (the table is allocated once, with the tokenizer).
type pieceCache struct {
	slots []cacheSlot
}

const (
	cacheKeyMax = 24 // bytes: the three key words
	cacheIDMax  = 8  // ids: the four id words
	// cacheBits sizes the table: 8,192 slots of 64 bytes, 512 KiB per
	// tokenizer, enough that the distinct words of a long prompt rarely
	// collide.
	cacheBits = 13
)

// cacheSlot is one cache line. meta is seq<<32 | key length<<8 | id
// count; seq is odd while a writer fills the slot, and 0 (with length
// 0) means empty.
type cacheSlot struct {
	meta atomic.Uint64
	key  [3]atomic.Uint64
	ids  [4]atomic.Uint64
}

func newPieceCache() *pieceCache {
	return &pieceCache{slots: make([]cacheSlot, 1<<cacheBits)}
}

// cacheKey is a piece packed into little-endian words, zero padded.
type cacheKey struct {
	w [3]uint64
	n int
}

// load8 reads s[i:i+8] little-endian (the compiler combines the loads).
func load8(s string, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}

// makeKey packs piece, which must be 1 to cacheKeyMax bytes long.
func makeKey(piece string) cacheKey {
	k := cacheKey{n: len(piece)}
	i := 0
	for ; i+8 <= len(piece); i += 8 {
		k.w[i>>3] = load8(piece, i)
	}
	// The last 0-7 bytes in at most three loads of 4, 2 and 1 bytes.
	var w uint64
	shift := 0
	if len(piece)-i >= 4 {
		_ = piece[i+3] // one bounds check, so the compiler combines the loads
		w = uint64(piece[i]) | uint64(piece[i+1])<<8 | uint64(piece[i+2])<<16 | uint64(piece[i+3])<<24
		i, shift = i+4, 32
	}
	if len(piece)-i >= 2 {
		_ = piece[i+1]
		w |= (uint64(piece[i]) | uint64(piece[i+1])<<8) << shift
		i, shift = i+2, shift+16
	}
	if i < len(piece) {
		w |= uint64(piece[i]) << shift
	}
	if len(piece) < cacheKeyMax {
		k.w[len(piece)>>3] = w
	}
	return k
}

// slot is the key's slot: a multiply-xorshift mix of its words.
func (c *pieceCache) slot(k *cacheKey) *cacheSlot {
	const m1, m2, m3 = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
	h := (k.w[0]*m1 ^ bits.RotateLeft64(k.w[1]*m2, 31) ^ bits.RotateLeft64(k.w[2]*m3, 17)) + uint64(k.n)
	h ^= h >> 29
	h *= m1
	return &c.slots[h>>(64-cacheBits)]
}

// get appends the cached ids of the key to dst; ok is false on a miss.
func (c *pieceCache) get(dst []uint32, k *cacheKey) ([]uint32, bool) {
	s := c.slot(k)
	m := s.meta.Load()
	if m>>32&1 != 0 || int(m>>8&0xFF) != k.n { // odd: being written; an empty slot has length 0
		return dst, false
	}
	if s.key[0].Load() != k.w[0] || s.key[1].Load() != k.w[1] || s.key[2].Load() != k.w[2] {
		return dst, false
	}
	n, start := int(m&0xFF), len(dst)
	for i := 0; i < n; i += 2 {
		w := s.ids[i/2].Load()
		dst = append(dst, uint32(w))
		if i+1 < n {
			dst = append(dst, uint32(w>>32))
		}
	}
	if s.meta.Load() != m {
		return dst[:start], false // a writer replaced the slot while we read it
	}
	return dst, true
}

// put stores ids (1 to cacheIDMax of them) as the key's, unless another
// writer holds the slot.
func (c *pieceCache) put(k *cacheKey, ids []uint32) {
	s := c.slot(k)
	m := s.meta.Load()
	seq := m >> 32
	if seq&1 != 0 || !s.meta.CompareAndSwap(m, (seq+1)<<32) {
		return
	}
	for i := range k.w {
		s.key[i].Store(k.w[i])
	}
	for i := 0; i < len(ids); i += 2 {
		w := uint64(ids[i])
		if i+1 < len(ids) {
			w |= uint64(ids[i+1]) << 32
		}
		s.ids[i/2].Store(w)
	}
	s.meta.Store((seq+2)<<32 | uint64(k.n)<<8 | uint64(len(ids)))
}
