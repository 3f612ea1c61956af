package kvindex

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
)

// WorkerID is the index's compact name for a worker, assigned on first use.
// IDs are 1–MaxWorkers; 0 is never a worker.
type WorkerID uint16

// MaxWorkers is how many workers one Index can know at a time.
const MaxWorkers = maxHolders

// Config sizes an Index. The zero value is valid.
type Config struct {
	// Shards is the number of lock stripes, rounded up to a power of two,
	// at most 4096. 0 means 64.
	//
	// Readers take no lock, so shards exist for writers: events from
	// different workers apply in parallel, and a table doubling copies
	// 1/Shards of the index while that shard's writers wait. Measured on
	// the shared 2-core dev box (go test -bench StoreParallel -benchtime 1x
	// -cpu 2: two writers, 4 Mi entries from empty, load average ~5):
	// 1 shard 2.6 M blocks/s with a 508 ms worst Store (the last doubling);
	// 8 shards 3.4 M blocks/s, 67 ms; 64 shards 3.2 M blocks/s, 70 ms (at
	// 8 and 64 the worst case was scheduling noise, not a doubling). 64
	// keeps each doubling small at a fixed cost of 4 KiB.
	Shards int
	// InitialSlots is each shard's starting table size, rounded up to a
	// power of two. 0 means 256. Preallocate for a known index size to
	// avoid doublings.
	InitialSlots int
}

// Index maps block hashes to the workers that hold them. All methods are
// safe for concurrent use. Lookups (Overlaps) take no lock and allocate
// nothing; writers lock one shard per block.
type Index struct {
	shards   []shard
	topShift uint   // shard = key >> topShift
	topMask  uint64 // key bits that select the shard

	// mu guards ids and free and orders membership changes: Store, Remove
	// and Clear hold it shared, DropWorker exclusively, so no write for a
	// worker can land after its drop and resurrect a reused ID.
	mu    sync.RWMutex
	ids   map[string]WorkerID
	free  []WorkerID               // dropped IDs, reused after fresh ones run out
	names atomic.Pointer[[]string] // by WorkerID; copy-on-write so lookups read it without a lock
	// gen counts changes to ids (written under mu): an ID looked up
	// under one gen is still the worker's while Gen returns the same.
	gen atomic.Uint64

	// held counts each worker's entries, by WorkerID: how much of its cache
	// the index says is in use (256 KiB for MaxWorkers counters).
	held [MaxWorkers + 1]atomic.Int64
	// heldTier counts them per tier (an entry in two tiers counts in both),
	// by WorkerID (192 KiB).
	heldTier [MaxWorkers + 1][NumTiers]atomic.Int64
}

// New returns an empty Index.
func New(cfg Config) *Index {
	ns := cfg.Shards
	if ns <= 0 {
		ns = 64
	}
	ns = min(ceilPow2(ns), 4096)
	slots := cfg.InitialSlots
	if slots <= 0 {
		slots = 256
	}
	slots = ceilPow2(max(slots, 8))
	shardBits := uint(bits.TrailingZeros(uint(ns)))
	x := &Index{
		shards:   make([]shard, ns),
		topShift: 64 - shardBits,
		ids:      make(map[string]WorkerID),
	}
	if shardBits > 0 {
		x.topMask = ^uint64(0) << x.topShift
	}
	for i := range x.shards {
		x.shards[i].tab.Store(newTable(slots))
	}
	names := []string{""} // ID 0 is never a worker
	x.names.Store(&names)
	return x
}

func ceilPow2(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

func (x *Index) shardOf(k uint64) *shard {
	if x.topShift == 64 {
		return &x.shards[0]
	}
	return &x.shards[k>>x.topShift]
}

// Stripes returns the number of lock stripes (Config.Shards, rounded).
func (x *Index) Stripes() int { return len(x.shards) }

// Stripe returns the lock stripe that holds block hash h. Stores and
// removals in different stripes touch disjoint tables, and otherwise only
// counters that add up: a list of them split by stripe and applied
// concurrently, each stripe's in the list's order, leaves the index exactly
// as applying the list in order would, provided the workers it names were
// registered in the same order first (StoreTier of no hashes registers).
// Clear and DropWorker touch every stripe.
func (x *Index) Stripe(h uint64) int {
	if x.topShift == 64 {
		return 0
	}
	return int(slotKey(h) >> x.topShift)
}

// ID returns the worker's index ID, if the index knows the worker.
// Cost: one map lookup under a shared lock.
func (x *Index) ID(worker string) (WorkerID, bool) {
	x.mu.RLock()
	id, ok := x.ids[worker]
	x.mu.RUnlock()
	return id, ok
}

// Name returns the worker an ID stands for, or "" if the ID is unused.
func (x *Index) Name(id WorkerID) string {
	names := *x.names.Load()
	if int(id) < len(names) {
		return names[id]
	}
	return ""
}

// Workers returns the number of workers the index knows.
func (x *Index) Workers() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.ids)
}

// register returns worker's ID, assigning one if needed. It returns false
// when all MaxWorkers IDs are taken.
func (x *Index) register(worker string) (WorkerID, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if id, ok := x.ids[worker]; ok {
		return id, true
	}
	old := *x.names.Load()
	var id WorkerID
	switch {
	case len(old) <= MaxWorkers:
		id = WorkerID(len(old))
	case len(x.free) > 0:
		id, x.free = x.free[0], x.free[1:]
	default:
		return 0, false
	}
	names := make([]string, max(len(old), int(id)+1))
	copy(names, old)
	names[id] = worker
	x.names.Store(&names)
	x.ids[worker] = id
	x.gen.Add(1)
	return id, true
}

// Store records that worker holds the blocks with the given hashes in GPU
// memory: StoreTier(worker, TierGPU, hashes).
func (x *Index) Store(worker string, hashes []uint64) bool {
	return x.StoreTier(worker, TierGPU, hashes)
}

// StoreTier records that worker holds the blocks with the given hashes in
// tier t (an invalid tier counts as TierDisk, the slowest). A worker is
// registered on its first store. Cost: one shard lock and one probe per
// hash, amortised O(1); a shard table doubles when 3/4 full. It reports
// false only when the index already knows MaxWorkers workers.
func (x *Index) StoreTier(worker string, t Tier, hashes []uint64) bool {
	x.mu.RLock()
	id, ok := x.ids[worker]
	x.mu.RUnlock()
	if !ok {
		if _, ok := x.register(worker); !ok {
			return false
		}
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	id, ok = x.ids[worker]
	if !ok {
		return true // dropped while we registered; nothing to record for it
	}
	x.apply(hashes, id, true, t.bit())
	return true
}

// apply adds (store) or removes the tiers of mask for id on every hash.
// Consecutive hashes of one shard share a lock and seq bracket. (Sorting an
// event's hashes to group them by shard was measured and lost: on 64-block
// events over 64 shards it saved few lock round trips and cost more in the
// sort.)
//
// The worker's counters (held, heldTier) are added once per call, not once
// per shard run: with 64 shards an event's hashes rarely share one, so that
// was two more atomic additions per block.
func (x *Index) apply(hashes []uint64, id WorkerID, store bool, mask uint16) {
	x.touch(hashes)
	held, heldTier := int64(0), int64(0)
	for i := 0; i < len(hashes); {
		s := x.shardOf(slotKey(hashes[i]))
		j := i + 1
		for j < len(hashes) && x.shardOf(slotKey(hashes[j])) == s {
			j++
		}
		delta, tierDelta := int64(0), int64(0)
		s.mu.Lock()
		s.seq.Add(1)
		for _, h := range hashes[i:j] {
			k := slotKey(h)
			if store {
				added, bits := s.add(k, id, mask, x.topMask)
				delta += b2i(added)
				tierDelta += b2i(bits != 0)
			} else {
				removed, bits := s.remove(k, id, mask, x.topMask)
				delta -= b2i(removed)
				tierDelta -= b2i(bits != 0)
			}
		}
		s.seq.Add(1)
		s.mu.Unlock()
		s.pairs.Add(delta)
		held += delta
		heldTier += tierDelta
		i = j
	}
	x.held[id].Add(held)
	x.heldTier[id][tierOfBit(mask)].Add(heldTier)
}

// touch loads the home slot of every hash before the writes begin. The loads
// are independent, so their cache misses overlap; the writes that follow are
// serialised by their lock and atomic instructions and would otherwise take
// one full memory latency each.
func (x *Index) touch(hashes []uint64) {
	var sink uint64
	for _, h := range hashes {
		k := slotKey(h)
		t := x.shardOf(k).tab.Load()
		sink += t.slots[t.home(k)].loadKey()
	}
	touchSink.Store(sink)
}

// touchSink keeps touch's loads from being optimised away.
var touchSink atomic.Uint64

// Remove records that worker no longer holds the given blocks in GPU
// memory: RemoveTier(worker, TierGPU, hashes).
func (x *Index) Remove(worker string, hashes []uint64) {
	x.RemoveTier(worker, TierGPU, hashes)
}

// RemoveTier records that worker no longer holds the given blocks in tier t
// (an invalid tier counts as TierDisk). A block the worker still holds in
// another tier stays indexed in that tier. Unknown workers and blocks are
// ignored. Cost: as StoreTier.
func (x *Index) RemoveTier(worker string, t Tier, hashes []uint64) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	id, ok := x.ids[worker]
	if !ok {
		return
	}
	x.apply(hashes, id, false, t.bit())
}

// Clear removes every block of worker and keeps the worker known (a worker
// restart, or a resync before a snapshot is applied). Cost: O(index size):
// each shard is rebuilt without the worker while lookups keep reading the
// old table; one shard's writers wait at a time.
func (x *Index) Clear(worker string) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if id, ok := x.ids[worker]; ok {
		x.clearID(id)
	}
}

func (x *Index) clearID(id WorkerID) {
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.Lock()
		if n, tiers := s.without(id, x.topMask); n > 0 {
			s.pairs.Add(int64(-n))
			x.held[id].Add(int64(-n))
			for t, c := range tiers {
				x.heldTier[id][t].Add(-c)
			}
		}
		s.mu.Unlock()
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// WorkerTierBlocks returns how many blocks the index says worker holds in
// each tier (a block held in two tiers counts in both; zeros for an unknown
// worker). Cost: one map lookup under a read lock.
func (x *Index) WorkerTierBlocks(worker string) [NumTiers]int {
	x.mu.RLock()
	id, ok := x.ids[worker]
	x.mu.RUnlock()
	var out [NumTiers]int
	if ok {
		for t := range out {
			out[t] = int(x.heldTier[id][t].Load())
		}
	}
	return out
}

// DropWorker forgets worker and all its blocks; its ID may later be reused.
// Cost: as Clear, and it waits for in-flight Store/Remove/Clear calls.
func (x *Index) DropWorker(worker string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	id, ok := x.ids[worker]
	if !ok {
		return
	}
	x.clearID(id)
	x.held[id].Store(0)
	for t := range NumTiers {
		x.heldTier[id][t].Store(0)
	}
	delete(x.ids, worker)
	x.gen.Add(1)
	old := *x.names.Load()
	names := make([]string, len(old))
	copy(names, old)
	names[id] = ""
	x.names.Store(&names)
	x.free = append(x.free, id)
}

// Gen changes whenever a worker gains or loses its ID: callers may keep
// the IDs they looked up (ID) while it returns the same value.
func (x *Index) Gen() uint64 { return x.gen.Load() }

// HeldBlocks is WorkerBlocks by ID (0 for ID 0): no lookup, one atomic load.
func (x *Index) HeldBlocks(id WorkerID) int { return int(x.held[id].Load()) }

// WorkerBlocks returns how many blocks the index says worker holds (0 for
// an unknown worker). Cost: one map lookup under a read lock.
func (x *Index) WorkerBlocks(worker string) int {
	x.mu.RLock()
	id, ok := x.ids[worker]
	x.mu.RUnlock()
	if !ok {
		return 0
	}
	return int(x.held[id].Load())
}

// Entries returns the number of (block, worker) entries. It is exact when no
// write is under way.
func (x *Index) Entries() int {
	n := int64(0)
	for i := range x.shards {
		n += x.shards[i].pairs.Load()
	}
	return int(n)
}

// Blocks returns the number of distinct blocks held by at least one worker.
// Cost: O(shards) under each shard's lock.
func (x *Index) Blocks() int {
	n := 0
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.Lock()
		t := s.tab.Load()
		for j := range t.slots {
			if t.slots[j].loadKey() != 0 && lane(t.slots[j].loadVal(), 3)&contFlag == 0 {
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}

// Slots returns the total capacity of the shard tables, for memory
// accounting: each slot is 16 bytes, and each table of 2 MiB or more also
// reserves up to 2 MiB of address space to align itself (see allocSlots).
func (x *Index) Slots() int {
	n := 0
	for i := range x.shards {
		n += len(x.shards[i].tab.Load().slots)
	}
	return n
}

// spinTries is how many seq-conflicted reads a lookup retries before it
// takes the shard's lock. A writer holds seq odd for well under a
// microsecond unless it is descheduled, which the lock then waits out.
const spinTries = 4

// readSet appends the members of block key k's holder set (worker ID and
// tier mask, as in a lane) to dst, consistently.
func (x *Index) readSet(k uint64, dst []uint16) []uint16 {
	s := x.shardOf(k)
	base := len(dst)
	for try := 0; ; try++ {
		locked := try >= spinTries
		if locked {
			s.mu.Lock()
		}
		s1 := s.seq.Load()
		dst = dst[:base]
		if s1&1 == 0 || locked {
			dst = readSetFrom(s.tab.Load(), k, dst, x.topMask)
		}
		if locked {
			s.mu.Unlock()
			return dst
		}
		if s1&1 == 0 && s.seq.Load() == s1 {
			return dst
		}
		if try > 0 {
			runtime.Gosched()
		}
	}
}

func readSetFrom(t *table, k uint64, dst []uint16, topMask uint64) []uint16 {
	hi := t.find(k)
	if hi < 0 {
		return dst
	}
	v := t.slots[hi].loadVal()
	n := int(lane(v, 3))
	if n&contFlag != 0 {
		return dst // a torn read landed on a continuation; the seq check retries
	}
	for j := 0; j < n; j++ {
		si, li := j/idsPerSlot, j%idsPerSlot
		if li == 0 && si > 0 {
			ci := t.find(contKey(k, si, topMask))
			if ci < 0 {
				return dst
			}
			v = t.slots[ci].loadVal()
		}
		dst = append(dst, lane(v, li))
	}
	return dst
}

// readHead returns the head slot value of block key k, consistently; 0 when
// absent.
func (x *Index) readHead(k uint64) uint64 {
	s := x.shardOf(k)
	for try := 0; ; try++ {
		if try >= spinTries {
			s.mu.Lock()
			v := headFrom(s.tab.Load(), k)
			s.mu.Unlock()
			return v
		}
		s1 := s.seq.Load()
		if s1&1 == 0 {
			v := headFrom(s.tab.Load(), k)
			if s.seq.Load() == s1 {
				return v
			}
		}
		if try > 0 {
			runtime.Gosched()
		}
	}
}

func headFrom(t *table, k uint64) uint64 {
	if i := t.find(k); i >= 0 {
		return t.slots[i].loadVal()
	}
	return 0
}
