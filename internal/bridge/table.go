package bridge

import (
	"math"
	"math/bits"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

// table maps engine block hashes to Switchyard hashes. It is 256 shards
// (by the top bits of a mixed hash), each an open-addressing table of
// 16-byte slots with linear probing and backward-shift deletion, at most
// 7/8 full, its capacity any integer (slots are found by multiply-shift,
// not a power-of-two mask). The key 0 marks an empty slot; a zero engine
// hash is kept beside the shards. The zero value is empty and ready; it is
// not safe for concurrent use.
//
// Why shards: a shard grows alone, by about a quarter, so growing never
// needs the old and the new storage of the whole table at once, and a
// grown table stays about 70% to 7/8 full. One table grown by half took
// the bridge to 85 MiB of RSS with 1M blocks when the engine did not
// report its KV capacity (the outgrown copy and the new one alive
// together, then left to the GC); with shards it is 58-62 MiB either way
// (BenchmarkBridgeMillionBlocks). A Go map of the same entries takes 2 to
// 4 times the memory at 1M blocks, depending on where its power-of-two
// growth falls.
type table struct {
	shards  [numShards]shard
	hasZero bool
	zeroVal uint64
}

const (
	shardBits = 8
	numShards = 1 << shardBits
	// minShard is a shard's first size: 256 shards of it are 64 KiB.
	minShard = 16
)

type shard struct {
	slots []slot
	n     int // keys in slots
}

type slot struct{ k, v uint64 }

// shard picks k's shard by the top bits of its mix (the rest pick the slot):
// engine hashes that differ little still spread.
func (t *table) shard(k uint64) *shard { return &t.shards[kvindex.Mix(k)>>(64-shardBits)] }

// home is k's first slot in s.
func (s *shard) home(k uint64) int {
	hi, _ := bits.Mul64(kvindex.Mix(k)<<shardBits, uint64(len(s.slots)))
	return int(hi)
}

// Len is the number of keys.
func (t *table) Len() int {
	n := 0
	if t.hasZero {
		n = 1
	}
	for i := range t.shards {
		n += t.shards[i].n
	}
	return n
}

func (t *table) Get(k uint64) (uint64, bool) {
	if k == 0 {
		return t.zeroVal, t.hasZero
	}
	s := t.shard(k)
	if len(s.slots) == 0 {
		return 0, false
	}
	for i := s.home(k); ; {
		switch s.slots[i].k {
		case k:
			return s.slots[i].v, true
		case 0:
			return 0, false
		}
		if i++; i == len(s.slots) {
			i = 0
		}
	}
}

func (t *table) Put(k, v uint64) {
	if k == 0 {
		t.hasZero, t.zeroVal = true, v
		return
	}
	s := t.shard(k)
	if (s.n+1)*8 > len(s.slots)*7 {
		s.resize(grown(len(s.slots)))
	}
	s.put(k, v)
}

func (s *shard) put(k, v uint64) {
	for i := s.home(k); ; {
		switch s.slots[i].k {
		case k:
			s.slots[i].v = v
			return
		case 0:
			s.slots[i] = slot{k, v}
			s.n++
			return
		}
		if i++; i == len(s.slots) {
			i = 0
		}
	}
}

// pageSlots is how many slots an 8 KiB page holds: the Go runtime gives
// an object over 32 KiB whole pages, so large shards are sized in them.
const pageSlots = 8 << 10 / 16

// grown is the size a shard of n slots grows to: a quarter more, in whole
// pages once that is over 32 KiB (rounding the quarter down, so that the
// rounding does not compound from one growth to the next).
func grown(n int) int {
	if m := max(minShard, n+n/4); m*16 <= 32<<10 {
		return m
	}
	pages := (n + pageSlots - 1) / pageSlots
	return (pages + max(1, pages/4)) * pageSlots
}

// resize moves s's keys into n slots.
func (s *shard) resize(n int) {
	old := s.slots
	s.slots = make([]slot, n)
	s.n = 0
	for _, x := range old {
		if x.k != 0 {
			s.put(x.k, x.v)
		}
	}
}

func (t *table) Delete(k uint64) {
	if k == 0 {
		t.hasZero, t.zeroVal = false, 0
		return
	}
	s := t.shard(k)
	if len(s.slots) == 0 {
		return
	}
	i := s.home(k)
	for s.slots[i].k != k {
		if s.slots[i].k == 0 {
			return
		}
		if i++; i == len(s.slots) {
			i = 0
		}
	}
	// Backward shift: pull later keys of the run into the hole when the
	// hole lies on their way from home.
	n := len(s.slots)
	for j := i; ; {
		if j++; j == n {
			j = 0
		}
		x := s.slots[j]
		if x.k == 0 {
			break
		}
		h := s.home(x.k)
		// x may move to i if i is cyclically in [h, j).
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			s.slots[i] = x
			i = j
		}
	}
	s.slots[i] = slot{}
	s.n--
}

// Reserve sizes the table for n keys, so that it does not grow until it
// holds about that many. Keys fall on shards binomially, so each shard
// gets room for its mean share and two standard deviations more, and then
// what rounding to whole pages adds (at 1.1M keys, 2.8 standard deviations
// in 10 pages a shard): a shard that still fills grows alone.
func (t *table) Reserve(n int) {
	per := float64(n) / numShards
	per += 2*math.Sqrt(per) + 1
	want := int(per*8/7) + 1
	if want*16 > 32<<10 {
		want = (want + pageSlots - 1) / pageSlots * pageSlots
	}
	for i := range t.shards {
		if s := &t.shards[i]; want > len(s.slots) {
			s.resize(want)
		}
	}
}

// Bytes is the storage the slots take.
func (t *table) Bytes() int {
	n := 0
	for i := range t.shards {
		n += len(t.shards[i].slots) * 16
	}
	return n
}

// Range calls fn for every key and value.
func (t *table) Range(fn func(k, v uint64)) {
	if t.hasZero {
		fn(0, t.zeroVal)
	}
	for i := range t.shards {
		for _, x := range t.shards[i].slots {
			if x.k != 0 {
				fn(x.k, x.v)
			}
		}
	}
}

// Reset drops every key, keeping the storage.
func (t *table) Reset() {
	for i := range t.shards {
		clear(t.shards[i].slots)
		t.shards[i].n = 0
	}
	t.hasZero, t.zeroVal = false, 0
}
