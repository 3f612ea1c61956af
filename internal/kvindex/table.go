package kvindex

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/switchyard-llm/switchyard/internal/hugepage"
)

// A shard is an open-addressing (linear probing) hash table from block hash
// to the set of workers holding the block. Writers serialise on mu and bracket
// every in-place change with seq increments (odd while a change is under
// way); readers take no lock: they read seq, the slots and seq again, and
// retry when it moved (a seqlock). Every slot word is read and written with
// sync/atomic, so the race detector sees no data race and a torn read is
// impossible; on amd64 an atomic load is a plain MOV, so independent probes
// of one lookup still overlap their cache misses.
//
// Holder sets are packed three members to a slot. Slot value layout
// (16-bit lanes, lane 0 lowest): lanes 0–2 are members (0 = empty lane), each
// a worker ID in bits 0–12 and the tiers the worker holds the block in as a
// mask in bits 13–15 (GPU, CPU, disk: a worker may hold a block in several,
// e.g. a prefix loaded back from host memory keeps its host copy); lane 3 of
// a head slot is the set's size n (1–8191), lane 3 of a continuation slot is
// contFlag. The tiers ride in ID bits nobody used (8,191 workers per index
// is eight times what simulate plans for), so an entry with its tier costs
// what an entry cost before. Members j = 3s..3s+2 of a set live in slot s:
// s = 0 is the head, stored under the block hash; s ≥ 1 is a continuation,
// stored under contKey(hash, s). A continuation key keeps the hash's top
// bits, so a whole set lives in one shard and one lock covers it, and its
// low bits, so it sits in the head's probe run. Most blocks have one to
// three holders and cost exactly one 16-byte slot.
type shard struct {
	mu    sync.Mutex            // serialises writers; readers fall back to it after repeated seq conflicts
	seq   atomic.Uint64         // odd while a writer changes slots in place
	tab   atomic.Pointer[table] // replaced whole on grow and rebuild; an old table is never written again
	used  int                   // occupied slots of tab; guarded by mu
	pairs atomic.Int64          // (block, worker) entries
	_     [24]byte              // keep neighbouring shards' hot words off this cache line
}

// slot words are accessed with sync/atomic functions, except while a table
// is being filled before it is published (grow, rebuild), when plain writes
// are safe and several times cheaper than atomic ones (XCHG on amd64).
type slot struct {
	key uint64 // 0 = empty
	val uint64
}

func (s *slot) loadKey() uint64   { return atomic.LoadUint64(&s.key) }
func (s *slot) loadVal() uint64   { return atomic.LoadUint64(&s.val) }
func (s *slot) storeKey(k uint64) { atomic.StoreUint64(&s.key, k) }
func (s *slot) storeVal(v uint64) { atomic.StoreUint64(&s.val, v) }

type table struct {
	slots []slot
	mask  uint64
}

const (
	idsPerSlot = 3
	contFlag   = 0x8000
	idMask     = 0x1fff // a member's worker ID bits
	tierShift  = 13     // a member's tier mask starts here
	maxHolders = idMask
	// maxLoadNum/maxLoadDen is the load factor at which a shard doubles.
	// Linear probing at 3/4 needs ~2.5 probes for a hit and ~8.5 for a
	// miss, all within two or three adjacent cache lines; between 3/8 and
	// 3/4 full a slot of 16 bytes costs 21–43 bytes per entry.
	maxLoadNum = 3
	maxLoadDen = 4
)

func newTable(n int) *table {
	return &table{slots: allocSlots(n), mask: uint64(n - 1)}
}

// hugeTables counts tables placed on huge-page-advised memory, for the
// benchmarks to report what they measured.
var hugeTables atomic.Int64

// allocSlots returns n zeroed slots. A table of at least one huge page is
// placed on huge pages (hugepage.Alloc).
//
// Why: a lookup's probes land on random pages of a table far larger than
// the TLB reaches with 4 KiB pages (1,536 second-level entries cover 6 MiB).
// Measured on the shared 2-core box: 512 independent random reads from a
// 256 MiB array took a median 28 ns each on 4 KiB pages and 13 ns each on
// madvised huge pages. On BenchmarkLookup10M/one-holder huge pages alone took
// the median lookup from ~41 to ~35 µs under load; they matter more once the
// lookup keeps many misses in flight (see prefetch), and the benchmark
// reports how many tables got the advice and how much THP the kernel gave.
//
// Why Go memory and not a private mmap: readers hold a table pointer without
// a lock, so an unmapped table could be read after a grow replaced it. The
// garbage collector frees a Go allocation only when no reader can still hold
// it (the interior slice pointer keeps the whole allocation alive), so
// nothing needs unmapping and there is no Close. The cost is the pad: up to
// 2 MiB of address space per table, untouched unless the allocator reused
// and zeroed memory.
func allocSlots(n int) []slot {
	const slotSize = int(unsafe.Sizeof(slot{}))
	if n*slotSize < hugepage.Size {
		return make([]slot, n)
	}
	b, huge := hugepage.Alloc(n * slotSize) // slots hold no pointers
	if huge {
		hugeTables.Add(1)
	}
	return unsafe.Slice((*slot)(unsafe.Pointer(&b[0])), n)
}

// slotKey maps a block hash to a table key: 0 marks an empty slot, so hash 0
// is stored as 1 (a 2^-64 collision, the same odds as any hash collision).
func slotKey(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// contKey is the key of continuation slot s (1 ≤ s < 2^14) of the set under
// key k. It differs from k only in bits 32 and up, below the shard bits: it
// lives in k's shard (one lock covers the set), and in any table of at most
// 2^32 slots it has k's home line, so the continuation sits in k's probe run
// (in its home line when putCont can make room), and a lookup of a block with
// more than three holders costs one cache miss, not two. (Measured on
// BenchmarkLookup10M/four-holders, with line-homed probing: a 102–124 µs
// median with a random continuation key, 57–71 µs like this.)
//
// The changed bits are g ^ s, where g is a hash of k with bit 46 set: bit 46
// is above every s, so g ^ s is never 0 and a continuation never equals its
// head; s enters linearly, so one set's continuations are distinct; and g is
// a full hash of k, so two blocks' continuation keys coincide only when 52 or
// more bits of random hashes do, the odds of any hash collision.
func contKey(k uint64, s int, topMask uint64) uint64 {
	field := ^topMask &^ (1<<32 - 1) // New caps shards at 4096, so field spans bits 32–51 at least
	g := (Mix(k) | 1<<46) & field
	d := k ^ (g ^ uint64(s)<<32)
	if d == 0 {
		d = 1
	}
	return d
}

// slotsPerLine is how many 16-byte slots fill a 64-byte cache line.
const slotsPerLine = 4

// home is where the probe for key k starts: the first slot of k's cache line
// (slot arrays are at least 64-byte aligned: Go places power-of-two sized
// allocations of 128 bytes and more on their size, and huge tables on
// 2 MiB). Starting each probe at a line boundary instead of at k's own slot
// keeps a probe run in the line a lookup prefetched: with a random start a
// third of hits spill into the next line, which costs a second, dependent
// cache miss.
func (t *table) home(k uint64) uint64 { return k & t.mask &^ (slotsPerLine - 1) }

// A line is the cache line of slots where probes for a key start.
type line [slotsPerLine]slot

// lineOf returns the home line of key k.
func (t *table) lineOf(k uint64) *line {
	i := t.home(k)
	return (*line)(t.slots[i : i+slotsPerLine])
}

// scan looks for key k in its home line l. It returns k's value and whether
// the line settles the question: false means k is not in the line and the
// line is full, so k's probe run continues past it (then use find). The four
// keys are compared without a branch per slot: which slot holds k is random,
// and a branch on it mispredicted about once a block in the lookup walk.
// Safe without the lock, but then only meaningful inside a seq-validated read.
func (l *line) scan(k uint64) (v uint64, ok bool) {
	k0, k1, k2, k3 := l[0].loadKey(), l[1].loadKey(), l[2].loadKey(), l[3].loadKey()
	v0, v1, v2, v3 := l[0].loadVal(), l[1].loadVal(), l[2].loadVal(), l[3].loadVal()
	v = pick(k, k0, k1, k2, k3, v0, v1, v2, v3)
	hit := b2u(k0 == k) | b2u(k1 == k) | b2u(k2 == k) | b2u(k3 == k)
	gap := b2u(k0 == 0) | b2u(k1 == 0) | b2u(k2 == 0) | b2u(k3 == 0)
	return v, hit|gap != 0
}

// pick returns the value beside key k among a line's four loaded keys
// (k0-k3) and values (v0-v3), or 0 if k is not there. It compiles to
// conditional moves, without a branch on which slot holds k, and is small
// enough to inline: matchRun keeps the eight words in registers.
func pick(k, k0, k1, k2, k3, v0, v1, v2, v3 uint64) uint64 {
	v := uint64(0)
	if k3 == k {
		v = v3
	}
	if k2 == k {
		v = v2
	}
	if k1 == k {
		v = v1
	}
	if k0 == k {
		v = v0
	}
	return v
}

// full reports whether none of a line's four loaded keys is empty.
func full(k0, k1, k2, k3 uint64) bool { return k0 != 0 && k1 != 0 && k2 != 0 && k3 != 0 }

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func lane(v uint64, i int) uint16 { return uint16(v >> (16 * uint(i))) }

func setLane(v uint64, i int, x uint16) uint64 {
	sh := 16 * uint(i)
	return v&^(0xffff<<sh) | uint64(x)<<sh
}

// find returns the index of key k in t, or -1. Safe without the lock (atomic
// loads), but then only meaningful inside a seq-validated read.
func (t *table) find(k uint64) int { return t.findFrom(k, t.home(k)) }

// findFrom is find starting at slot i of k's probe run, for a caller that
// has already looked at the slots before it.
func (t *table) findFrom(k, i uint64) int {
	for {
		sk := t.slots[i].loadKey()
		if sk == k {
			return int(i)
		}
		if sk == 0 {
			return -1
		}
		i = (i + 1) & t.mask
	}
}

// put stores k→v in a free slot of t. k must be absent; t must have room.
func (t *table) put(k, v uint64) {
	i := t.home(k)
	for t.slots[i].loadKey() != 0 {
		i = (i + 1) & t.mask
	}
	t.slots[i].storeVal(v)
	t.slots[i].storeKey(k)
}

// putCont stores continuation key ck→v like put, but when the free slot
// lies past ck's home line it moves there a one-slot head from the home
// line (not head, the set's own) and takes that head's slot, so the set
// stays readable from its home line. Linear probing allows it: the moved
// key's probe run, from its home to the free slot, has no gap. Why: a
// continuation stored once the table is full otherwise lands half the
// time past the home line (measured on BenchmarkLookup10M's index at 0.62
// load: 49% in the home line, 26% one line on, 25% two to thirty), and
// each line past it is one more miss in the lookup of a block shared by
// several workers, the blocks most likely to be asked for. The moved head
// belongs to a block with one to three holders, whose lookup needs one slot
// and now reads past its own line. t must have room.
//
// Which head moves: one that had already spilled into the line from an
// earlier one if there is one (its lookup reads past its home line either
// way), otherwise the line's last movable head. A line fills from its first
// slot, so its last head is roughly the one stored most recently, and
// engines evict their least recently used blocks: an old block still
// indexed is one that keeps being used, a new one is as likely a prompt's
// unique tail. The number of displaced heads is the same either way; which
// lookups pay for them changes. Taking the first movable head, as this did
// before, put 2.2% of BenchmarkLookup10M/one-holder's blocks (its chains are
// the first stored) past their home line; now 0.06%.
func (t *table) putCont(head, ck, v uint64) {
	h := t.home(ck)
	i := h
	for t.slots[i].loadKey() != 0 {
		i = (i + 1) & t.mask
	}
	if (i-h)&t.mask >= slotsPerLine {
		move, found := uint64(0), false
		for q := h + slotsPerLine - 1; q+1 > h; q-- {
			qk, qv := t.slots[q].loadKey(), t.slots[q].loadVal()
			if qk == head || lane(qv, 3)&contFlag != 0 || lane(qv, 3) > idsPerSlot {
				continue
			}
			if !found || t.home(qk) != h {
				move, found = q, true
			}
			if t.home(qk) != h {
				break
			}
		}
		if found {
			t.slots[i].storeVal(t.slots[move].loadVal())
			t.slots[i].storeKey(t.slots[move].loadKey())
			i = move
		}
	}
	t.slots[i].storeVal(v)
	t.slots[i].storeKey(ck)
}

// fill stores k→v in a free slot of an unpublished t with plain writes.
func (t *table) fill(k, v uint64) {
	i := t.home(k)
	for t.slots[i].key != 0 {
		i = (i + 1) & t.mask
	}
	t.slots[i] = slot{key: k, val: v}
}

// del empties slot i and shifts later members of its probe run back, so
// lookups never need tombstones. Only the hole left at the end is cleared;
// slots in between are overwritten by the member moved into them. (Clearing
// each one first cost two more atomic stores per step, XCHG on amd64:
// table.del was 22% of BenchmarkStoreSteady's profile before this.)
// Readers may see a member twice or not at all mid-shift; the shard's seq,
// odd throughout, makes them retry.
func (t *table) del(i uint64) {
	j := i
	for {
		j = (j + 1) & t.mask
		k := t.slots[j].loadKey()
		if k == 0 {
			t.slots[i].storeKey(0)
			t.slots[i].storeVal(0)
			return
		}
		home := t.home(k)
		// Move slot j back to i unless its home lies cyclically in (i, j].
		if i <= j {
			if i < home && home <= j {
				continue
			}
		} else if i < home || home <= j {
			continue
		}
		t.slots[i].storeVal(t.slots[j].loadVal())
		t.slots[i].storeKey(k)
		i = j
	}
}

// add records that worker id holds the block under key k in the tiers of
// mask (tier bits, as Tier.bit). Called with mu held and seq odd. It reports
// whether the (block, worker) entry is new, and the tier bits it gained (a
// known entry gains the tiers it lacked).
func (s *shard) add(k uint64, id WorkerID, mask uint16, topMask uint64) (bool, uint16) {
	m := uint16(id) | mask
	t := s.tab.Load()
	hi := t.find(k)
	if hi < 0 {
		t = s.reserve(1)
		t.put(k, uint64(m)|1<<48)
		s.used++
		return true, mask
	}
	head := t.slots[hi].loadVal()
	n := int(lane(head, 3))
	if j := setIndex(t, k, head, n, id, topMask); j >= 0 {
		si := slotOf(t, k, j, topMask)
		v := t.slots[si].loadVal()
		old := lane(v, j%idsPerSlot)
		if old|mask != old {
			t.slots[si].storeVal(setLane(v, j%idsPerSlot, old|mask))
		}
		return false, mask &^ old
	}
	if n >= maxHolders {
		return false, 0
	}
	si, li := n/idsPerSlot, n%idsPerSlot
	switch {
	case si == 0:
		head = setLane(head, li, m)
	case li == 0:
		t = s.reserve(1)
		t.putCont(k, contKey(k, si, topMask), uint64(m)|contFlag<<48)
		s.used++
		hi = t.find(k)
	default:
		ci := t.find(contKey(k, si, topMask))
		t.slots[ci].storeVal(setLane(t.slots[ci].loadVal(), li, m))
	}
	t.slots[hi].storeVal(setLane(head, 3, uint16(n+1)))
	return true, mask
}

// reserve makes room for extra more slots, doubling the table when needed.
// Called with mu held and seq odd. The new table is filled before it is
// published and the old one is never written again.
func (s *shard) reserve(extra int) *table {
	t := s.tab.Load()
	if (s.used+extra)*maxLoadDen <= len(t.slots)*maxLoadNum {
		return t
	}
	n := len(t.slots) * 2
	for (s.used+extra)*maxLoadDen > n*maxLoadNum {
		n *= 2
	}
	nt := newTable(n)
	for i := range t.slots {
		if k := t.slots[i].key; k != 0 { // mu held: nobody writes t
			nt.fill(k, t.slots[i].val)
		}
	}
	s.tab.Store(nt)
	return nt
}

// setIndex returns the position of id in the n-member set whose head value
// is head, or -1.
func setIndex(t *table, k, head uint64, n int, id WorkerID, topMask uint64) int {
	v := head
	for j := 0; j < n; j++ {
		si, li := j/idsPerSlot, j%idsPerSlot
		if li == 0 && si > 0 {
			ci := t.find(contKey(k, si, topMask))
			if ci < 0 {
				return -1 // cannot happen while the set is intact
			}
			v = t.slots[ci].loadVal()
		}
		if WorkerID(lane(v, li)&idMask) == id {
			return j
		}
	}
	return -1
}

// slotOf returns the table index of the slot holding member j of the set
// under key k.
func slotOf(t *table, k uint64, j int, topMask uint64) int {
	if si := j / idsPerSlot; si > 0 {
		return t.find(contKey(k, si, topMask))
	}
	return t.find(k)
}

// remove drops the tiers of mask from worker id's entry under key k, and the
// entry itself once it has no tier left. Called with mu held and seq odd. It
// reports whether the entry was removed, and the tier bits it lost.
func (s *shard) remove(k uint64, id WorkerID, mask uint16, topMask uint64) (bool, uint16) {
	t := s.tab.Load()
	hi := t.find(k)
	if hi < 0 {
		return false, 0
	}
	head := t.slots[hi].loadVal()
	n := int(lane(head, 3))
	p := setIndex(t, k, head, n, id, topMask)
	if p < 0 {
		return false, 0
	}
	pi := slotOf(t, k, p, topMask)
	pv := t.slots[pi].loadVal()
	lost := lane(pv, p%idsPerSlot) & mask
	if lane(pv, p%idsPerSlot)&^mask&^idMask != 0 {
		// Still held in another tier: drop only these.
		if lost != 0 {
			t.slots[pi].storeVal(setLane(pv, p%idsPerSlot, lane(pv, p%idsPerSlot)&^mask))
		}
		return false, lost
	}
	last := n - 1
	if last == 0 {
		t.del(uint64(hi))
		s.used--
		return true, lost
	}
	// Move the last member into p, then shrink the set by one.
	li := slotOf(t, k, last, topMask)
	lastM := lane(t.slots[li].loadVal(), last%idsPerSlot)
	t.slots[pi].storeVal(setLane(t.slots[pi].loadVal(), p%idsPerSlot, lastM))
	if last%idsPerSlot == 0 {
		t.del(uint64(slotOf(t, k, last, topMask)))
		s.used--
	} else {
		li = slotOf(t, k, last, topMask)
		t.slots[li].storeVal(setLane(t.slots[li].loadVal(), last%idsPerSlot, 0))
	}
	hi = t.find(k)
	t.slots[hi].storeVal(setLane(t.slots[hi].loadVal(), 3, uint16(last)))
	return true, lost
}

// without rebuilds the shard with worker id removed from every set. It
// builds the new table while readers keep using the old one, then publishes
// it; mu must be held. It returns the number of entries removed and, per
// tier, how many of them held the block there.
func (s *shard) without(id WorkerID, topMask uint64) (int, [NumTiers]int64) {
	var tiers [NumTiers]int64
	old := s.tab.Load()
	nt := newTable(len(old.slots))
	fresh := &shard{}
	fresh.tab.Store(nt)
	removed := 0
	for i := range old.slots {
		k := old.slots[i].loadKey()
		if k == 0 {
			continue
		}
		head := old.slots[i].loadVal()
		if lane(head, 3)&contFlag != 0 {
			continue // rebuilt through its head
		}
		n := int(lane(head, 3))
		v := head
		for j := 0; j < n; j++ {
			si, li := j/idsPerSlot, j%idsPerSlot
			if li == 0 && si > 0 {
				v = old.slots[old.find(contKey(k, si, topMask))].loadVal()
			}
			m := lane(v, li)
			if WorkerID(m&idMask) == id {
				removed++
				for tr := range NumTiers {
					tiers[tr] += int64(m >> (tierShift + tr) & 1)
				}
				continue
			}
			fresh.add(k, WorkerID(m&idMask), m&^idMask, topMask)
		}
	}
	if removed == 0 {
		return 0, tiers
	}
	s.seq.Add(1)
	s.tab.Store(fresh.tab.Load())
	s.used = fresh.used
	s.seq.Add(1)
	return removed, tiers
}
