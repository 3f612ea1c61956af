package sim

import (
	"sync/atomic"

	"github.com/switchyard-llm/switchyard/internal/hugepage"
)

// blockTable is the prefix cache's hash → block map: an open-addressing
// table with linear probing, sized once for every block of the cache (it
// never holds more entries than blocks) at a load factor of at most 1/2.
//
// Why not a Go map: `switchyard simulate` runs a thousand block managers
// whose maps (28,000 entries each for llama-3.1-8b on an H100) are far
// larger than the CPU caches, so every lookup is a cache miss; a Go map
// takes two to four dependent ones (directory, table, control word, slot),
// this table one for an absent hash and two for a present one. Profiled at
// 1,000 workers the map took 20% of a run's CPU.
//
// A slot is 8 bytes: the high 32 bits of the mixed hash (its fingerprint,
// which also gives its home slot) and the block index plus one (0 marks an
// empty slot). The full hash lives in the block itself, so a fingerprint
// match is confirmed there. The zero value is not usable; newBlockTable
// sizes it. Not safe for concurrent use.
type blockTable struct {
	slots []uint64
	shift uint // 32 - log2(len(slots)): fingerprint → home slot
	n     int
}

// fibMul spreads a hash over the fingerprint's bits: hashes that differ
// only in their low bits (tests use small integers) still get distinct
// homes. Odd, so the mix is a bijection.
const fibMul = 0x9e3779b97f4a7c15

func newBlockTable(blocks int) blockTable {
	n := 8
	bits := uint(3)
	for n < 2*blocks && bits < 32 {
		n, bits = n*2, bits+1
	}
	return blockTable{slots: hugepage.Slice[uint64](&kvArena, n), shift: 32 - bits}
}

func fingerprint(h uint64) uint64 { return (h * fibMul) >> 32 }

func (t *blockTable) homeOf(fp uint64) uint64 { return fp >> t.shift }

// len is the number of hashes held.
func (t *blockTable) len() int { return t.n }

// find returns the slot holding h and true, or the empty slot where h
// would go and false.
func (t *blockTable) find(h uint64, blocks []block) (uint64, bool) {
	fp := fingerprint(h)
	mask := uint64(len(t.slots) - 1)
	for j := t.homeOf(fp); ; j = (j + 1) & mask {
		v := t.slots[j]
		if v == 0 {
			return j, false
		}
		if v>>32 == fp && blocks[uint32(v)-1].hash == h {
			return j, true
		}
	}
}

// get returns the block caching h.
func (t *blockTable) get(h uint64, blocks []block) (int32, bool) {
	j, ok := t.find(h, blocks)
	if !ok {
		return 0, false
	}
	return int32(uint32(t.slots[j]) - 1), true
}

// has reports whether some block caches h.
func (t *blockTable) has(h uint64, blocks []block) bool {
	_, ok := t.find(h, blocks)
	return ok
}

// setAt fills the empty slot j, found by find for h, with block i.
func (t *blockTable) setAt(j, h uint64, i int32) {
	t.slots[j] = fingerprint(h)<<32 | uint64(uint32(i)+1)
	t.n++
}

// remove drops h, cached by block i; absent hashes are ignored.
func (t *blockTable) remove(h uint64, i int32) {
	want := fingerprint(h)<<32 | uint64(uint32(i)+1)
	mask := uint64(len(t.slots) - 1)
	j := t.homeOf(want >> 32)
	for ; t.slots[j] != want; j = (j + 1) & mask {
		if t.slots[j] == 0 {
			return
		}
	}
	// Backward-shift deletion: pull later entries of the probe run into
	// the hole when their home allows, so lookups never need tombstones.
	for k := (j + 1) & mask; t.slots[k] != 0; k = (k + 1) & mask {
		if home := t.homeOf(t.slots[k] >> 32); (k-home)&mask >= (k-j)&mask {
			t.slots[j] = t.slots[k]
			j = k
		}
	}
	t.slots[j] = 0
	t.n--
}

// prefetch loads the home slots of hashes before a run of lookups: the
// loads are independent, so their cache misses overlap, where the lookups
// that follow would take them one after another.
func (t *blockTable) prefetch(hashes []uint64) {
	var sink uint64
	for _, h := range hashes {
		sink += t.slots[t.homeOf(fingerprint(h))]
	}
	prefetchSink.Add(sink)
}

// prefetchSink keeps prefetch's loads from being optimised away.
var prefetchSink atomic.Uint64
