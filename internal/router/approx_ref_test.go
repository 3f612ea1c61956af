package router

import (
	"sync"
	"time"
)

// refApprox is the approximate index as a Go map and a ring, the
// implementation the open-addressed one replaced: TestApproxMatchesMap
// holds the two to the same answers.
type refApprox struct {
	ttl      time.Duration
	capacity int

	mu sync.Mutex // guards everything below
	m  map[uint64]refEntry
	// Workers by a small number: an entry holds no pointer, so the garbage
	// collector has nothing to follow in a map of up to a million entries
	// (a worker ID string per entry gave it one each). Numbers are never
	// reused; a process sees few workers.
	ids  map[string]uint32
	ring []refRingEntry // insertion order; may hold superseded records, told apart by seq
	head int            // next record to evict
	size int            // records in ring
	seq  uint64
}

type refEntry struct {
	worker uint32 // a.ids number, from 1
	at     int64  // unix nanoseconds of the routing decision
	seq    uint64
}

type refRingEntry struct {
	hash uint64
	seq  uint64
}

// refInitialRing is the ring's starting size. The ring and the map grow
// with use up to their bounds instead of being allocated whole: at the
// default capacity (1 Mi hashes) an up-front allocation cost every frontend
// tens of MB before it routed a request.
const refInitialRing = 1024

func newRefApprox(ttl time.Duration, capacity int) *refApprox {
	return &refApprox{
		ttl:      ttl,
		capacity: capacity,
		m:        make(map[uint64]refEntry),
		ids:      make(map[string]uint32),
		ring:     make([]refRingEntry, min(refInitialRing, 2*capacity)),
	}
}

// grow doubles the ring, at most to twice the capacity, keeping its order.
// Called with mu held.
func (a *refApprox) grow() bool {
	if len(a.ring) >= 2*a.capacity {
		return false
	}
	nr := make([]refRingEntry, min(2*len(a.ring), 2*a.capacity))
	for i := 0; i < a.size; i++ {
		nr[i] = a.ring[(a.head+i)%len(a.ring)]
	}
	a.ring, a.head = nr, 0
	return true
}

// record notes that worker was sent the blocks hashes at now. Allocation-free
// once the map and ring have grown to capacity.
func (a *refApprox) record(worker string, hashes []uint64, now time.Time) {
	at := now.UnixNano()
	a.mu.Lock()
	defer a.mu.Unlock()
	id, ok := a.ids[worker]
	if !ok {
		id = uint32(len(a.ids) + 1)
		a.ids[worker] = id
	}
	for _, h := range hashes {
		if e, ok := a.m[h]; ok && e.at > at {
			continue // a later decision (another replica's arrives late) stands
		}
		a.seq++
		a.m[h] = refEntry{worker: id, at: at, seq: a.seq}
		if a.size == len(a.ring) && !a.grow() {
			a.evictOne()
		}
		a.ring[(a.head+a.size)%len(a.ring)] = refRingEntry{hash: h, seq: a.seq}
		a.size++
		for len(a.m) > a.capacity {
			a.evictOne()
		}
	}
}

// evictOne drops the oldest ring record, and its map entry if the record is
// still the current one for its hash. Called with mu held and size > 0.
func (a *refApprox) evictOne() {
	r := a.ring[a.head]
	a.head = (a.head + 1) % len(a.ring)
	a.size--
	if e, ok := a.m[r.hash]; ok && e.seq == r.seq {
		delete(a.m, r.hash)
	}
}

// overlap returns the number of leading blocks of hashes last sent to
// worker less than ttl before now.
func (a *refApprox) overlap(worker string, hashes []uint64, now time.Time) int {
	oldest := now.Add(-a.ttl).UnixNano()
	a.mu.Lock()
	defer a.mu.Unlock()
	id, ok := a.ids[worker]
	if !ok {
		return 0
	}
	n := 0
	for _, h := range hashes {
		e, ok := a.m[h]
		if !ok || e.worker != id || e.at < oldest {
			break
		}
		n++
	}
	return n
}

// forget drops every record of worker. Cost: O(records).
func (a *refApprox) forget(worker string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	id, ok := a.ids[worker]
	if !ok {
		return
	}
	for h, e := range a.m {
		if e.worker == id {
			delete(a.m, h)
		}
	}
}

func (a *refApprox) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.m)
}
