package tokenizer

import (
	"container/list"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// sectionCache memoizes one HuggingFace tokenizer's section encodings
// (hf.Tokenizer.AppendSection): the ids of the text between the added
// tokens that are split out first, such as <|im_start|> and <|im_end|>.
// Every chat template rendered here puts such tokens around each turn, so
// a turn's text is a section of its own: a repeated conversation, or the
// earlier turns of a growing one, are looked up instead of encoded again.
//
// The key is the section's text itself, compared in full (no digest that
// could collide), and a cache belongs to one tokenizer, so a hit is the
// ids AppendSection would return, by construction; the oracle tests run
// through it. It is a bounded LRU, safe for concurrent use.
//
// A section is stored the second time it is seen, not the first: a
// doorkeeper remembers digests of sections seen once. A stream of unique
// prompts then costs a hash each instead of a copy of the text and ids
// (~40 µs of CPU per 1,500-word prompt in BenchmarkReadRequest, the heap
// growing by the cache), and cannot flush the sections that do repeat. A
// conversation's turn is sent again with every later turn, so it is a hit
// from the third request that carries it. A false doorkeeper match only
// stores a section early.
type sectionCache struct {
	maxBytes int64
	minLen   int // shorter sections are encoded, not cached (minCachedSection; tests lower it)

	seed maphash.Seed
	seen []atomic.Uint64 // doorkeeper: digests by their low bits, direct-mapped

	mu      sync.Mutex // guards entries, lru and bytes
	entries map[string]*list.Element
	lru     *list.List // of *sectionEntry, most recent first
	bytes   int64

	hits, misses atomic.Uint64
}

type sectionEntry struct {
	text string
	ids  []uint32 // never modified once stored
}

const (
	// minCachedSection: shorter sections ("\n", "assistant\n", a short
	// question) encode in a few µs, about what a lookup and its bookkeeping
	// cost, so they are encoded every time and do not crowd the cache.
	minCachedSection = 256
	// sectionCacheBytes bounds a cache: the text and ids it keeps plus
	// entryOverhead each; ~16 MiB of text and ids for 64 MiB.
	sectionCacheBytes = 64 << 20
	entryOverhead     = 160 // map slot, list element and entry headers, roughly
	// doorkeeperBits sizes the doorkeeper: 64 Ki digests (512 KiB), many
	// times the sections a full cache holds, so a section seen once is
	// still remembered when it comes again.
	doorkeeperBits = 16
)

func newSectionCache(maxBytes int64) *sectionCache {
	return &sectionCache{maxBytes: maxBytes, minLen: minCachedSection, seed: maphash.MakeSeed(),
		seen: make([]atomic.Uint64, 1<<doorkeeperBits), entries: make(map[string]*list.Element), lru: list.New()}
}

// admit says whether s, not in the cache, should be stored: whether it
// was seen before. It remembers s otherwise.
func (c *sectionCache) admit(s string) bool {
	h := maphash.String(c.seed, s)
	slot := &c.seen[h&(1<<doorkeeperBits-1)]
	if slot.Load() == h {
		return true
	}
	slot.Store(h)
	return false
}

// appendSection appends the ids of section s, from the cache or from
// encode (which must be a pure function of s), and remembers them.
func (c *sectionCache) appendSection(dst []uint32, s string, encode func([]uint32, string) []uint32) []uint32 {
	if len(s) < c.minLen {
		return encode(dst, s)
	}
	c.mu.Lock()
	if el, ok := c.entries[s]; ok {
		c.lru.MoveToFront(el)
		ids := el.Value.(*sectionEntry).ids
		c.mu.Unlock()
		c.hits.Add(1)
		return append(dst, ids...)
	}
	c.mu.Unlock()
	c.misses.Add(1)
	start := len(dst)
	dst = encode(dst, s)
	if c.admit(s) {
		c.put(s, dst[start:])
	}
	return dst
}

func (c *sectionCache) put(s string, ids []uint32) {
	size := int64(len(s)) + 4*int64(len(ids)) + entryOverhead
	if size > c.maxBytes/8 {
		return // one huge section would flush the rest
	}
	// The key is cloned: s is a slice of a rendered prompt, which must not
	// be kept alive whole.
	e := &sectionEntry{text: strings.Clone(s), ids: append([]uint32(nil), ids...)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[s]; ok {
		return // another request stored it meanwhile
	}
	c.entries[e.text] = c.lru.PushFront(e)
	c.bytes += size
	for c.bytes > c.maxBytes {
		old := c.lru.Remove(c.lru.Back()).(*sectionEntry)
		delete(c.entries, old.text)
		c.bytes -= int64(len(old.text)) + 4*int64(len(old.ids)) + entryOverhead
	}
}

// CacheStats are a tokenizer's section-cache counters since it was opened.
type CacheStats struct {
	Hits, Misses uint64 // sections of at least minCachedSection bytes looked up
	Entries      int
	Bytes        int64 // what the entries hold, with overhead
}

func (c *sectionCache) stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Entries: len(c.entries), Bytes: c.bytes}
}
