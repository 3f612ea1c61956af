package router

import (
	"math/bits"
	"math/rand/v2"
	"sync"
	"time"
)

// approx is the approximate index: for each block hash, the worker the
// router last sent it to and when. It stands in for KV events of workers
// whose events are not healthy, on the assumption that a worker keeps the
// blocks of a request it served for a while (ttl). It remembers at most
// capacity hashes; beyond that the oldest records go first, so memory is
// bounded whatever the traffic.
//
// The hashes are kept in an open-addressed table (linear probing,
// deletion by shifting the rest of a run back, so no tombstones) rather
// than a Go map: a cold 1,500-word prompt records 125 new blocks, each a
// lookup, an insert and, at capacity, the eviction of an old one, and in
// a table of up to a million entries each of those is a cache miss. A
// probe here lands on the slot itself; a map first reads its control
// word, then the slot.
type approx struct {
	ttl      time.Duration
	capacity int

	mu sync.Mutex // guards everything below
	t  approxShards
	// Workers by a small number: a slot holds no pointer, so the garbage
	// collector has nothing to follow in a table of up to a million
	// entries. Numbers are never reused; a process sees few workers.
	ids  map[string]uint32
	ring []ringEntry // insertion order; may hold superseded records, told apart by seq
	head int         // next record to evict
	size int         // records in ring
	// seq numbers records. It wraps, which is harmless: a slot's record
	// is told from the ring's older ones by equality, and the ring holds
	// at most 2 × capacity ≤ 2³¹ records.
	seq uint32
}

// approxSlot is one hash's entry; worker 0 marks an empty slot.
type approxSlot struct {
	hash   uint64
	at     int64  // unix nanoseconds of the routing decision
	worker uint32 // a.ids number, from 1
	seq    uint32 // the record that set it
}

type ringEntry struct {
	hash uint64
	seq  uint32
}

// approxInitialRing is the ring's and the table's starting size. They
// grow with use up to their bounds instead of being allocated whole: at
// the default capacity (1 Mi hashes) an up-front allocation cost every
// frontend tens of MB before it routed a request.
const approxInitialRing = 1024

// maxApproxCapacity keeps seq's wrap harmless (see approx.seq).
const maxApproxCapacity = 1 << 30

func newApprox(ttl time.Duration, capacity int) *approx {
	capacity = min(capacity, maxApproxCapacity)
	return &approx{
		ttl:      ttl,
		capacity: capacity,
		t:        newApproxShards(approxInitialRing, rand.Uint64()),
		ids:      make(map[string]uint32),
		ring:     make([]ringEntry, min(approxInitialRing, 2*capacity)),
	}
}

// grow doubles the ring, at most to twice the capacity, keeping its order.
// Called with mu held.
func (a *approx) grow() bool {
	if len(a.ring) >= 2*a.capacity {
		return false
	}
	nr := make([]ringEntry, min(2*len(a.ring), 2*a.capacity))
	for i := 0; i < a.size; i++ {
		nr[i] = a.ring[(a.head+i)%len(a.ring)]
	}
	a.ring, a.head = nr, 0
	return true
}

// record notes that worker was sent the blocks hashes at now. Allocation-free
// once the table and ring have grown to capacity.
func (a *approx) record(worker string, hashes []uint64, now time.Time) {
	at := now.UnixNano()
	a.mu.Lock()
	defer a.mu.Unlock()
	id, ok := a.ids[worker]
	if !ok {
		id = uint32(len(a.ids) + 1)
		a.ids[worker] = id
	}
	for _, h := range hashes {
		t := a.t.of(h)
		i, found := t.find(h)
		if found && t.slots[i].at > at {
			continue // a later decision (another replica's arrives late) stands
		}
		a.seq++
		a.t.put(t, i, found, approxSlot{hash: h, at: at, worker: id, seq: a.seq})
		if a.size == len(a.ring) && !a.grow() {
			a.evictOne()
		}
		a.ring[(a.head+a.size)%len(a.ring)] = ringEntry{hash: h, seq: a.seq}
		a.size++
		for a.t.used > a.capacity {
			a.evictOne()
		}
	}
}

// evictOne drops the oldest ring record, and its table entry if the record
// is still the current one for its hash. Called with mu held and size > 0.
func (a *approx) evictOne() {
	r := a.ring[a.head]
	a.head = (a.head + 1) % len(a.ring)
	a.size--
	t := a.t.of(r.hash)
	if i, ok := t.find(r.hash); ok && t.slots[i].seq == r.seq {
		a.t.remove(t, i)
	}
}

// overlap returns the number of leading blocks of hashes last sent to
// worker less than ttl before now.
func (a *approx) overlap(worker string, hashes []uint64, now time.Time) int {
	oldest := now.Add(-a.ttl).UnixNano()
	a.mu.Lock()
	defer a.mu.Unlock()
	id, ok := a.ids[worker]
	if !ok {
		return 0
	}
	n := 0
	for _, h := range hashes {
		t := a.t.of(h)
		i, ok := t.find(h)
		if !ok {
			break
		}
		if e := &t.slots[i]; e.worker != id || e.at < oldest {
			break
		}
		n++
	}
	return n
}

// forget drops every record of worker. Cost: O(table).
func (a *approx) forget(worker string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	id, ok := a.ids[worker]
	if !ok {
		return
	}
	a.t.keep(func(s *approxSlot) bool { return s.worker != id })
}

func (a *approx) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.t.used
}

// approxShards splits the index's table in approxShardCount tables by
// hash, each growing on its own: a table grows by rehashing all of it at
// once, under the index's lock, and one table of up to 2 Mi slots paused
// every routing decision for 60-90 ms when it doubled at its last growth
// (a 786 Ki-entry rehash, measured on a busy 2-core machine). A shard's
// last growth is a 64th of that. Filling an index to its default capacity
// with cold 125-block records, the slowest record took 11-12 ms sharded,
// as with the Go map this replaced (12-47 ms): the runtime's own pauses.
type approxShards struct {
	t    [approxShardCount]approxTable
	key  uint64
	used int // entries in all shards
}

const (
	approxShardBits  = 6
	approxShardCount = 1 << approxShardBits
)

func newApproxShards(n int, key uint64) approxShards {
	s := approxShards{key: key}
	for i := range s.t {
		s.t[i] = newApproxTable(max(n/approxShardCount, 8), key)
	}
	return s
}

// of returns the shard of h: the top bits of a second mix of h, apart
// from the bits a shard's home takes.
func (s *approxShards) of(h uint64) *approxTable {
	return &s.t[((h^s.key)*0xc2b2ae3d27d4eb4f)>>(64-approxShardBits)]
}

// put stores e in shard t at i, what t.find(e.hash) returned: e's slot
// (found) or the empty one where it goes, which a full shard's growth
// moves.
func (s *approxShards) put(t *approxTable, i int, found bool, e approxSlot) {
	if !found {
		if t.full() {
			t.grow()
			i, _ = t.find(e.hash)
		}
		t.used++
		s.used++
	}
	t.slots[i] = e
}

// remove empties slot i of shard t.
func (s *approxShards) remove(t *approxTable, i int) {
	t.remove(i)
	s.used--
}

// keep drops every entry keep refuses.
func (s *approxShards) keep(keep func(*approxSlot) bool) {
	s.used = 0
	for i := range s.t {
		t := &s.t[i]
		t.rebuild(len(t.slots), keep)
		s.used += t.used
	}
}

// approxTable is a linear-probing hash table of approxSlots, a power of
// two in size and at most three-quarters full. A slot's home is the top
// bits of its hash mixed with a per-table random key (Fibonacci hashing):
// block hashes are already uniform, and the key keeps a client who knows
// how they are made from building a prompt whose blocks share one run.
type approxTable struct {
	slots []approxSlot
	shift uint // 64 - log2(len(slots))
	key   uint64
	used  int
}

func newApproxTable(n int, key uint64) approxTable {
	return approxTable{slots: make([]approxSlot, n), shift: uint(64 - bits.TrailingZeros(uint(n))), key: key}
}

func (t *approxTable) home(h uint64) int {
	return int(((h ^ t.key) * 0x9e3779b97f4a7c15) >> t.shift)
}

// find returns h's slot and true, or the empty slot where h would go and
// false.
func (t *approxTable) find(h uint64) (int, bool) {
	mask := len(t.slots) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.worker == 0 {
			return i, false
		}
		if s.hash == h {
			return i, true
		}
	}
}

// full reports whether one more entry would pass three-quarters.
func (t *approxTable) full() bool { return 4*(t.used+1) > 3*len(t.slots) }

// grow doubles the table, rehashing every entry (see approxShards).
func (t *approxTable) grow() { t.rebuild(2*len(t.slots), nil) }

// rebuild replaces the table with one of n slots holding the entries keep
// accepts (all, when keep is nil).
func (t *approxTable) rebuild(n int, keep func(*approxSlot) bool) {
	old := t.slots
	*t = newApproxTable(n, t.key)
	for i := range old {
		s := &old[i]
		if s.worker == 0 || keep != nil && !keep(s) {
			continue
		}
		j, _ := t.find(s.hash)
		t.slots[j] = *s
		t.used++
	}
}

// remove empties slot i, moving back each later slot of its run that a
// probe from its home would otherwise no longer reach.
func (t *approxTable) remove(i int) {
	mask := len(t.slots) - 1
	t.used--
	for j := i; ; {
		t.slots[i] = approxSlot{}
		for {
			j = (j + 1) & mask
			s := &t.slots[j]
			if s.worker == 0 {
				return
			}
			// s may fill the hole at i unless its home lies cyclically
			// in (i, j]: then a probe for it starts past the hole.
			if k := t.home(s.hash); (j-k)&mask >= (j-i)&mask {
				t.slots[i] = *s
				i = j
				break
			}
		}
	}
}
