package sim

import "github.com/switchyard-llm/switchyard/internal/kvevents"

// noBlock marks the ends of the LRU list.
const noBlock = -1

// block is one slot of the paged KV cache.
type block struct {
	hash   uint64
	cached bool  // hash is valid and the block is in blockManager.byHash
	ref    int32 // sequences (and leases) using the block
	// prev and next link the unreferenced cached blocks in LRU order.
	prev, next int32
}

// blockManager owns the paged KV cache: a fixed array of blocks, the prefix
// cache (hash → block), reference counts and an LRU of unreferenced cached
// blocks, which are the only ones eviction may take. Every store and evict
// appends to events. Not safe for concurrent use: the engine's mutex guards
// it.
type blockManager struct {
	blocks []block
	free   []int32 // unreferenced, uncached blocks
	byHash map[uint64]int32
	// lruHead is the least recently released unreferenced cached block.
	lruHead, lruTail int32
	lruLen           int
	used             int // blocks with ref > 0
	events           []kvevents.Event
}

func newBlockManager(n int) *blockManager {
	m := &blockManager{
		blocks:  make([]block, n),
		free:    make([]int32, n),
		byHash:  make(map[uint64]int32, n),
		lruHead: noBlock,
		lruTail: noBlock,
	}
	for i := range m.free {
		// Hand out low indexes first: easier to read in tests.
		m.free[i] = int32(n - 1 - i)
	}
	return m
}

func (m *blockManager) total() int { return len(m.blocks) }

// available is how many blocks an allocation could obtain: free ones plus
// evictable ones.
func (m *blockManager) available() int { return len(m.free) + m.lruLen }

// prefixLen returns how many leading hashes are cached.
func (m *blockManager) prefixLen(hashes []uint64) int {
	for i, h := range hashes {
		if _, ok := m.byHash[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// evictableAmong counts the blocks of hashes (all cached) that sit in the
// LRU: acquiring them takes them out of the evictable pool.
func (m *blockManager) evictableAmong(hashes []uint64) int {
	n := 0
	for _, h := range hashes {
		if m.blocks[m.byHash[h]].ref == 0 {
			n++
		}
	}
	return n
}

// acquireCached takes a reference on the cached block of hash h.
func (m *blockManager) acquireCached(h uint64) int32 {
	i := m.byHash[h]
	m.ref(i)
	return i
}

func (m *blockManager) ref(i int32) {
	b := &m.blocks[i]
	if b.ref == 0 {
		m.used++
		if b.cached {
			m.lruRemove(i)
		}
	}
	b.ref++
}

// allocate returns a fresh block with one reference, evicting the least
// recently used unreferenced cached block when none is free. ok is false
// when every block is referenced.
func (m *blockManager) allocate() (int32, bool) {
	var i int32
	if n := len(m.free); n > 0 {
		i = m.free[n-1]
		m.free = m.free[:n-1]
	} else if m.lruHead != noBlock {
		i = m.lruHead
		m.lruRemove(i)
		b := &m.blocks[i]
		delete(m.byHash, b.hash)
		b.cached = false
		m.emitRemoved(b.hash)
	} else {
		return 0, false
	}
	m.blocks[i].ref = 1
	m.used++
	return i, true
}

// commit records that block i now holds the computed KV of hash h, whose
// chain parent is parent. If another block already caches h (two sequences
// computed the same prefix at once), i stays uncached and the existing
// block keeps serving the prefix.
func (m *blockManager) commit(i int32, parent, h uint64) {
	if _, dup := m.byHash[h]; dup {
		return
	}
	b := &m.blocks[i]
	b.hash, b.cached = h, true
	m.byHash[h] = i
	m.emitStored(parent, h)
}

// release drops one reference on block i. An unreferenced cached block
// becomes the most recently used eviction candidate; an uncached one is
// freed.
func (m *blockManager) release(i int32) {
	b := &m.blocks[i]
	b.ref--
	if b.ref > 0 {
		return
	}
	m.used--
	if b.cached {
		m.lruPush(i)
	} else {
		m.free = append(m.free, i)
	}
}

// clearUnreferenced drops every unreferenced cached block. It emits Cleared
// when nothing cached is left, otherwise one Removed with the dropped hashes.
func (m *blockManager) clearUnreferenced() int {
	var hashes []uint64
	for m.lruHead != noBlock {
		i := m.lruHead
		m.lruRemove(i)
		b := &m.blocks[i]
		delete(m.byHash, b.hash)
		b.cached = false
		hashes = append(hashes, b.hash)
		m.free = append(m.free, i)
	}
	switch {
	case len(m.byHash) == 0:
		m.events = append(m.events, kvevents.Event{Kind: kvevents.Cleared})
	case len(hashes) > 0:
		m.events = append(m.events, kvevents.Event{Kind: kvevents.Removed, Hashes: hashes})
	}
	return len(hashes)
}

// emitStored appends h to the previous Stored event when it continues the
// same chain, so a prefill of many blocks makes one event.
func (m *blockManager) emitStored(parent, h uint64) {
	if n := len(m.events); n > 0 {
		e := &m.events[n-1]
		if e.Kind == kvevents.Stored && e.Hashes[len(e.Hashes)-1] == parent {
			e.Hashes = append(e.Hashes, h)
			return
		}
	}
	m.events = append(m.events, kvevents.Event{Kind: kvevents.Stored, Parent: parent, Hashes: []uint64{h}})
}

func (m *blockManager) emitRemoved(h uint64) {
	if n := len(m.events); n > 0 && m.events[n-1].Kind == kvevents.Removed {
		m.events[n-1].Hashes = append(m.events[n-1].Hashes, h)
		return
	}
	m.events = append(m.events, kvevents.Event{Kind: kvevents.Removed, Hashes: []uint64{h}})
}

// takeEvents returns the pending events and starts a new list. The
// returned slice is the caller's.
func (m *blockManager) takeEvents() []kvevents.Event {
	ev := m.events
	m.events = nil
	return ev
}

func (m *blockManager) lruPush(i int32) {
	b := &m.blocks[i]
	b.prev, b.next = m.lruTail, noBlock
	if m.lruTail != noBlock {
		m.blocks[m.lruTail].next = i
	} else {
		m.lruHead = i
	}
	m.lruTail = i
	m.lruLen++
}

func (m *blockManager) lruRemove(i int32) {
	b := &m.blocks[i]
	if b.prev != noBlock {
		m.blocks[b.prev].next = b.next
	} else {
		m.lruHead = b.next
	}
	if b.next != noBlock {
		m.blocks[b.next].prev = b.prev
	} else {
		m.lruTail = b.prev
	}
	b.prev, b.next = noBlock, noBlock
	m.lruLen--
}

// cachedHashes calls fn with every cached hash, referenced or not.
func (m *blockManager) cachedHashes() []uint64 {
	out := make([]uint64, 0, len(m.byHash))
	for i := range m.blocks {
		if m.blocks[i].cached {
			out = append(out, m.blocks[i].hash)
		}
	}
	return out
}
