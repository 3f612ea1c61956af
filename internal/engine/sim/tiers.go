package sim

import (
	"time"

	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/perfmodel"
)

// tierEntry is one block held in a lower tier.
type tierEntry struct {
	hash, parent uint64
	ref          int32 // loads in flight from this copy
	// readyAt is when the write that put the block here completes: a load
	// cannot start earlier.
	readyAt    time.Duration
	prev, next *tierEntry // LRU of unreferenced entries
	inLRU      bool
}

// tierStore is a lower KV tier (host memory, disk): a fixed number of block
// slots, LRU over unreferenced entries, like the GPU tier. Writes into it go
// over a link modelled as one queue: each block takes blockBytes/writeBW
// after the previous write, and is readable from then on. Not safe for
// concurrent use: the block manager's owner guards it.
type tierStore struct {
	tier       kvevents.Tier
	capacity   int
	entries    map[uint64]*tierEntry
	head, tail *tierEntry // LRU: head is the least recently used
	lruLen     int
	writeFree  time.Duration // when the write link is next idle
	writeCost  time.Duration // per block
	hits       int64         // blocks loaded from here
	stored     int64         // blocks written here
}

func newTierStore(t kvevents.Tier, capacity int, writeCost time.Duration) *tierStore {
	return &tierStore{tier: t, capacity: capacity, entries: make(map[uint64]*tierEntry, min(capacity, 1<<16)), writeCost: writeCost}
}

func (t *tierStore) lruPush(e *tierEntry) {
	e.prev, e.next, e.inLRU = t.tail, nil, true
	if t.tail != nil {
		t.tail.next = e
	} else {
		t.head = e
	}
	t.tail = e
	t.lruLen++
}

func (t *tierStore) lruRemove(e *tierEntry) {
	if !e.inLRU {
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		t.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		t.tail = e.prev
	}
	e.prev, e.next, e.inLRU = nil, nil, false
	t.lruLen--
}

// ref pins the entry of h against eviction while a load reads it.
func (t *tierStore) ref(h uint64) {
	e := t.entries[h]
	if e.ref == 0 {
		t.lruRemove(e)
	}
	e.ref++
}

// unref drops a pin; the entry becomes the most recently used.
func (t *tierStore) unref(h uint64) {
	e := t.entries[h]
	if e == nil {
		return
	}
	if e.ref--; e.ref == 0 {
		t.lruPush(e)
	}
}

// lowerTiers is the chain of tiers below the GPU, fastest first; a block
// evicted from one is written to the next.
type lowerTiers []*tierStore

// find returns the fastest lower tier holding h, or nil.
func (ts lowerTiers) find(h uint64) *tierStore {
	for _, t := range ts {
		if _, ok := t.entries[h]; ok {
			return t
		}
	}
	return nil
}

// tierRef is a load's pin on one lower-tier copy, h, read into block i of
// the loading sequence.
type tierRef struct {
	t *tierStore
	h uint64
	i int
}

// loadLanded caches the blocks s loaded, now that its load has finished,
// and releases the lower-tier copies. Until then the blocks are not in GPU
// memory for anyone: no GPU Stored event, no GPU hit for another prompt
// (which loads its own copy). vLLM does the same with blocks a KV connector
// loads (the scheduler allocates them with delay_cache_blocks and caches
// them when the transfer completes). Caching them on admission, as this
// engine did, let a prompt admitted during the load compute on KV that was
// not there yet, and told the router the blocks were on the GPU early.
func (c *Core) loadLanded(s *seq) {
	for _, r := range s.loading {
		c.bm.commit(s.blocks[r.i], c.parentOf(s, r.i), r.h, s.tokens[r.i*c.bs:(r.i+1)*c.bs:(r.i+1)*c.bs], s.req.Salt)
	}
	c.loadDone(s)
}

// loadDone releases the lower-tier copies s was loading from (its load has
// landed, or s is being freed before it did).
func (c *Core) loadDone(s *seq) {
	for _, r := range s.loading {
		r.t.unref(r.h)
	}
	s.loading = s.loading[:0]
}

// nextLoad returns the earliest end of a load that running sequences wait
// for, or 0 when none is pending.
func (c *Core) nextLoad() time.Duration {
	next := time.Duration(0)
	for _, s := range c.running {
		if s.loadUntil > c.clock && (next == 0 || s.loadUntil < next) {
			next = s.loadUntil
		}
	}
	return next
}

// worthLoading returns how many leading blocks of a match (src, from
// blockManager.match) a prompt of prompt tokens should take from the cache:
// all of them when loading the lower-tier blocks beats recomputing them
// (perfmodel.LowerTierSaving), else only those before the first lower-tier
// block. tiers counts the taken blocks by tier.
func (c *Core) worthLoading(src []kvevents.Tier, prompt int) (n int, tiers [kvevents.NumTiers]int) {
	first := len(src)
	for i, t := range src {
		tiers[t]++
		if t != kvevents.TierGPU && first == len(src) {
			first = i
		}
	}
	if first == len(src) {
		return len(src), tiers
	}
	cpu, disk := tiers[kvevents.TierCPU]*c.bs, tiers[kvevents.TierDisk]*c.bs
	gpuTokens := len(src)*c.bs - cpu - disk
	recompute, load := perfmodel.LowerTierSaving(&c.profile, prompt, gpuTokens, cpu, disk)
	if load < recompute {
		return len(src), tiers
	}
	return first, [kvevents.NumTiers]int{kvevents.TierGPU: first}
}
