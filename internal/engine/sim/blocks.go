package sim

import (
	"time"

	"github.com/switchyard-llm/switchyard/internal/hugepage"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

// noBlock marks the ends of the LRU list.
const noBlock = -1

// block is one slot of the paged KV cache.
type block struct {
	hash   uint64
	parent uint64 // the chain parent of hash, for the event when it is offloaded
	cached bool   // hash is valid and the block is in blockManager.byHash
	ref    int32  // sequences (and leases) using the block
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
	byHash blockTable
	// lruHead is the least recently released unreferenced cached block.
	lruHead, lruTail int32
	lruLen           int
	blockSize        int
	used             int // blocks with ref > 0
	events           []kvevents.Event
	// spareHashes are emptied hash lists of published events, handed back
	// by Core.RecycleEvents, for emit to fill instead of growing new ones.
	spareHashes [][]uint64
	// wire, when set, records what a wire publisher needs besides events.
	wire *StepTokens
	// lower is the tiers below the GPU, fastest first (none without
	// offloading); a block evicted from the GPU is written to lower[0].
	lower lowerTiers
	// now is the simulated time of the step being planned: offload writes
	// queue on their link from then.
	now time.Duration
	// loadFree is when the host-to-device link is next idle: loads from
	// the lower tiers queue on it (writes go the other way, on their own).
	loadFree time.Duration
}

// kvArena holds the block arrays and prefix-cache tables of every core in
// the process, on huge pages.
//
// Why: `switchyard simulate` runs a thousand cores whose blocks and tables
// (1.4 MiB per llama-3.1-8b H100 worker, 1.4 GB in all) are read at random;
// on 4 KiB pages nearly every such read also missed the TLB, and the first
// touch of each page was a fault. Each is too small to align on a huge page
// of its own, so they share 64 MiB chunks.
var kvArena hugepage.Arena

func newBlockManager(n int) *blockManager {
	m := &blockManager{
		blocks:  hugepage.Slice[block](&kvArena, n),
		free:    make([]int32, n),
		byHash:  newBlockTable(n),
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

// prefetchBlocks loads blocks ids before a run of writes to them, as
// blockTable.prefetch does for slots.
func (m *blockManager) prefetchBlocks(ids []int32) {
	var sink int32
	for _, i := range ids {
		if i >= 0 {
			sink += m.blocks[i].ref
		}
	}
	prefetchSink.Add(uint64(sink))
}

// available is how many blocks an allocation could obtain: free ones plus
// evictable ones.
func (m *blockManager) available() int { return len(m.free) + m.lruLen }

// prefixLen returns how many leading hashes are cached.
func (m *blockManager) prefixLen(hashes []uint64) int {
	for i, h := range hashes {
		if !m.byHash.has(h, m.blocks) {
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
		if i, _ := m.byHash.get(h, m.blocks); m.blocks[i].ref == 0 {
			n++
		}
	}
	return n
}

// evictableGPU counts the blocks of hashes whose match source (src) is the
// GPU and that sit in the LRU: acquiring them takes them out of the
// evictable pool.
func (m *blockManager) evictableGPU(hashes []uint64, src []kvevents.Tier) int {
	n := 0
	for i, h := range hashes {
		if src[i] != kvevents.TierGPU {
			continue
		}
		if b, _ := m.byHash.get(h, m.blocks); m.blocks[b].ref == 0 {
			n++
		}
	}
	return n
}

// acquireCached takes a reference on the cached block of hash h.
func (m *blockManager) acquireCached(h uint64) int32 {
	i, _ := m.byHash.get(h, m.blocks)
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
		m.byHash.remove(b.hash, i)
		b.cached = false
		m.emit(kvevents.Removed, kvevents.TierGPU, 0, b.hash)
		m.offload(0, b.hash, b.parent)
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
//
// toks are the block's tokens and salt the request's cache_salt; they are
// kept only for a wire publisher (nil toks: unknown, as for blocks received
// from another worker).
func (m *blockManager) commit(i int32, parent, h uint64, toks []uint32, salt string) {
	j, dup := m.byHash.find(h, m.blocks)
	if dup {
		return
	}
	b := &m.blocks[i]
	b.hash, b.parent, b.cached = h, parent, true
	m.byHash.setAt(j, h, i)
	m.emit(kvevents.Stored, kvevents.TierGPU, parent, h)
	if w := m.wire; w != nil {
		if toks == nil {
			w.Unknown = append(w.Unknown, h)
			toks = make([]uint32, m.blockSize)
		}
		w.Tokens = append(w.Tokens, toks...)
		if salt != "" && parent == kvindex.Root(salt) {
			if w.Salts == nil {
				w.Salts = make(map[uint64]string)
			}
			w.Salts[h] = salt
		}
	}
}

// offload writes block h, just evicted from the tier above, to lower tier
// level, evicting that tier's least recently used unreferenced block (to
// the next tier) when it is full. A block already there is only marked
// used. When every block of a full tier is being loaded, h is dropped.
func (m *blockManager) offload(level int, h, parent uint64) {
	if level >= len(m.lower) {
		return
	}
	t := m.lower[level]
	if e, ok := t.entries[h]; ok {
		if e.ref == 0 {
			t.lruRemove(e)
			t.lruPush(e)
		}
		return
	}
	if len(t.entries) >= t.capacity {
		v := t.head
		if v == nil {
			return
		}
		t.lruRemove(v)
		delete(t.entries, v.hash)
		m.emit(kvevents.Removed, t.tier, 0, v.hash)
		m.offload(level+1, v.hash, v.parent)
	}
	e := &tierEntry{hash: h, parent: parent, readyAt: max(t.writeFree, m.now) + t.writeCost}
	t.writeFree = e.readyAt
	t.entries[h] = e
	t.lruPush(e)
	t.stored++
	m.emit(kvevents.Stored, t.tier, parent, h)
}

// match fills src with the tier of each leading block of hashes held in any
// tier (TierGPU when it is in GPU memory, else the fastest lower tier
// holding it) and returns it; its length is the match.
func (m *blockManager) match(hashes []uint64, src []kvevents.Tier) []kvevents.Tier {
	src = src[:0]
	for _, h := range hashes {
		if m.byHash.has(h, m.blocks) {
			src = append(src, kvevents.TierGPU)
		} else if t := m.lower.find(h); t != nil {
			src = append(src, t.tier)
		} else {
			break
		}
	}
	return src
}

// lowerTier returns the lower tier store of tier t.
func (m *blockManager) lowerTier(t kvevents.Tier) *tierStore {
	for _, s := range m.lower {
		if s.tier == t {
			return s
		}
	}
	return nil
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

// clearUnreferenced drops every unreferenced cached block, in every tier. It
// emits Cleared when nothing cached is left, otherwise Removed events with
// the dropped hashes, per tier.
func (m *blockManager) clearUnreferenced() int {
	mark := len(m.events)
	n := 0
	for _, t := range m.lower {
		for t.head != nil {
			e := t.head
			t.lruRemove(e)
			delete(t.entries, e.hash)
			m.emit(kvevents.Removed, t.tier, 0, e.hash)
			n++
		}
	}
	lowerLeft := 0
	for _, t := range m.lower {
		lowerLeft += len(t.entries)
	}
	gpu := m.clearGPU()
	if m.byHash.len() == 0 && lowerLeft == 0 {
		m.events = append(m.events[:mark], kvevents.Event{Kind: kvevents.Cleared})
	}
	return n + gpu
}

// clearGPU drops every unreferenced cached GPU block.
func (m *blockManager) clearGPU() int {
	var hashes []uint64
	for m.lruHead != noBlock {
		i := m.lruHead
		m.lruRemove(i)
		b := &m.blocks[i]
		m.byHash.remove(b.hash, i)
		b.cached = false
		hashes = append(hashes, b.hash)
		m.free = append(m.free, i)
	}
	if len(hashes) > 0 {
		m.events = append(m.events, kvevents.Event{Kind: kvevents.Removed, Hashes: hashes})
	}
	return len(hashes)
}

// emit appends an event for block h. A Stored continuing the previous
// Stored event's chain in the same medium extends it, as does a Removed
// following a Removed of the same medium, so a prefill of many blocks makes
// one event.
func (m *blockManager) emit(kind kvevents.Kind, medium kvevents.Tier, parent, h uint64) {
	if n := len(m.events); n > 0 {
		e := &m.events[n-1]
		if e.Kind == kind && e.Medium == medium && (kind == kvevents.Removed || e.Hashes[len(e.Hashes)-1] == parent) {
			e.Hashes = append(e.Hashes, h)
			return
		}
	}
	ev := kvevents.Event{Kind: kind, Medium: medium, Hashes: m.newHashes(h)}
	if kind == kvevents.Stored {
		ev.Parent = parent
	}
	m.events = append(m.events, ev)
}

// newHashes returns a hash list holding h, reusing one handed back by
// Core.RecycleEvents when there is one.
func (m *blockManager) newHashes(h uint64) []uint64 {
	if n := len(m.spareHashes); n > 0 {
		hs := m.spareHashes[n-1]
		m.spareHashes = m.spareHashes[:n-1]
		return append(hs, h)
	}
	return []uint64{h}
}

// maxSpareHashes bounds the hash lists a block manager keeps for reuse. A
// step's events are one Stored list per sequence that committed blocks and
// one Removed list per tier, and the lists that grow (prefill chunks,
// evictions) are a few a step; the bound keeps a thousand idle cores from
// holding more than a few MiB each.
const maxSpareHashes = 16

// takeEvents returns the pending events and starts a new list. The
// returned slice is the caller's.
func (m *blockManager) takeEvents() []kvevents.Event {
	ev := m.events
	m.events = nil
	return ev
}

// StepTokens is what a wire publisher needs besides a step's events to
// speak an engine's wire: the tokens of every block stored in GPU memory,
// block after block in the order of the GPU Stored events' hashes, and the
// cache_salt of each block that starts a salted chain. Unknown lists stored
// blocks whose tokens the engine does not know (received over kvxfer);
// their tokens are zeros. Stored events of lower tiers (offloads) carry
// blocks stored on the GPU before, and no tokens here.
type StepTokens struct {
	Tokens  []uint32
	Salts   map[uint64]string
	Unknown []uint64
}

// TokenPublisher is an EventPublisher that also wants each step's
// StepTokens (the vLLM-wire publisher): the engine then records them.
type TokenPublisher interface {
	EventPublisher
	PublishStepTokens(events []kvevents.Event, st *StepTokens)
}

// takeTokens returns the recorded tokens and starts a new record.
func (m *blockManager) takeTokens() *StepTokens {
	w := m.wire
	m.wire = &StepTokens{Tokens: make([]uint32, 0, len(w.Tokens))}
	return w
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

// tierHashes calls fn with the hashes held in each tier, GPU first.
func (m *blockManager) tierHashes(fn func(kvevents.Tier, []uint64)) {
	fn(kvevents.TierGPU, m.cachedHashes())
	for _, t := range m.lower {
		hs := make([]uint64, 0, len(t.entries))
		for h := range t.entries {
			hs = append(hs, h)
		}
		fn(t.tier, hs)
	}
}

// cachedHashes calls fn with every cached hash, referenced or not.
func (m *blockManager) cachedHashes() []uint64 {
	out := make([]uint64, 0, m.byHash.len())
	for i := range m.blocks {
		if m.blocks[i].cached {
			out = append(out, m.blocks[i].hash)
		}
	}
	return out
}
