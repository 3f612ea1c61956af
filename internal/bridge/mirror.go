package bridge

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/switchyard-llm/switchyard/internal/enginewire"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

// Media is a set of tiers, one bit each: where the engine holds one block.
// A block is held while any bit is set.
type Media uint8

// Has says whether m includes tier t.
func (m Media) Has(t kvevents.Tier) bool { return m&(1<<t) != 0 }

// Fastest is the fastest tier in m (GPU before CPU before disk).
func (m Media) Fastest() kvevents.Tier {
	for t := kvevents.TierGPU; t < kvindex.NumTiers; t++ {
		if m.Has(t) {
			return t
		}
	}
	return kvevents.TierDisk
}

const gpuOnly = Media(1 << kvevents.TierGPU)

// TierOf maps an engine medium onto Switchyard's tiers: GPU, CPU (SGLang's
// CPU_PINNED too), disk; an unknown medium is the slowest tier, never GPU,
// and ok is false so the caller counts it.
func TierOf(m enginewire.Medium) (t kvevents.Tier, ok bool) {
	switch m {
	case enginewire.MediumGPU:
		return kvevents.TierGPU, true
	case enginewire.MediumCPU:
		return kvevents.TierCPU, true
	case enginewire.MediumDisk:
		return kvevents.TierDisk, true
	}
	return kvevents.TierDisk, false
}

// Stats counts what a Mirror did with engine events. Every field only grows.
type Stats struct {
	Events         uint64 // events applied
	StoredBlocks   uint64 // full blocks stored (every medium)
	RemovedBlocks  uint64 // engine blocks removed from a medium
	RemoveEvents   uint64 // BlockRemoved events applied (each names one or more blocks)
	Clears         uint64 // AllBlocksCleared
	Skipped        uint64 // events of another KV group or attention kind
	UnknownKind    uint64 // events of a type this bridge does not know
	UnknownRemoved uint64 // BlockRemoved hashes the mirror did not hold
	Orphans        uint64 // BlockStored events whose parent the mirror did not hold (indexed under an unknown-parent root)
	Partial        uint64 // blocks with fewer tokens than the block size (not indexed)
	UnknownMedium  uint64 // events naming a medium this bridge does not know (indexed as disk)
	BadEvents      uint64 // events inconsistent in themselves (token count, extra keys)
}

// ErrBlockSize is returned when an event's block size is not the one the
// bridge was configured with: Switchyard's hashes would then never match
// the frontend's, so the bridge must stop rather than index garbage.
var ErrBlockSize = errors.New("bridge: engine block size differs from --block-size")

// Mirror is one engine's block set, keyed by the engine's hashes, together
// with the Switchyard hash each was rewritten to and the tiers holding it.
// It is not safe for concurrent use: the bridge guards it with its lock.
//
// Memory: a sharded open-addressing table of engine hash → Switchyard hash
// (16 bytes a slot, at most 7/8 full; see table), plus a map of tiers for
// the few blocks held anywhere but on the GPU alone. The Switchyard hash 0
// marks a block known but not indexed (a partial SGLang page), so its
// removal is recognised. BenchmarkMirrorRSS: 20 MiB of heap for 1M GPU
// blocks, grown from empty.
type Mirror struct {
	blockSize int
	sy        table            // engine hash → Switchyard hash
	media     map[uint64]Media // engine hash → tiers, when not GPU only
	out       []kvevents.Event
	hashes    []uint64 // backing store for out's Hashes
	extra     []uint64 // per-block extra-key digests of the event being applied
	stats     Stats
}

// NewMirror returns an empty mirror for engines with the given block size.
func NewMirror(blockSize int) *Mirror {
	return &Mirror{blockSize: blockSize, media: make(map[uint64]Media)}
}

// Stats returns the counters.
func (m *Mirror) Stats() Stats { return m.stats }

// Len is the number of engine blocks held, on any tier.
func (m *Mirror) Len() int { return m.sy.Len() }

// MediaOf returns the tiers holding the engine block h, or 0.
func (m *Mirror) MediaOf(h uint64) Media {
	if _, ok := m.sy.Get(h); !ok {
		return 0
	}
	if md, ok := m.media[h]; ok {
		return md
	}
	return gpuOnly
}

// Hashes calls fn with the Switchyard hashes held in each tier, in chunks.
// A hash two engine blocks map to is given twice (the index's Store is
// idempotent).
func (m *Mirror) Hashes(fn func(t kvevents.Tier, hashes []uint64)) {
	var bufs [kvindex.NumTiers][]uint64
	m.sy.Range(func(eh, h uint64) {
		if h == 0 {
			return
		}
		md := gpuOnly
		if x, ok := m.media[eh]; ok {
			md = x
		}
		for t := kvevents.TierGPU; t < kvindex.NumTiers; t++ {
			if !md.Has(t) {
				continue
			}
			bufs[t] = append(bufs[t], h)
			if len(bufs[t]) == 4096 {
				fn(t, bufs[t])
				bufs[t] = bufs[t][:0]
			}
		}
	})
	for t, b := range bufs {
		if len(b) > 0 || t == 0 {
			fn(kvevents.Tier(t), b)
		}
	}
}

// Reserve sizes the mirror for n blocks, so that it does not grow until it
// holds about that many. The bridge calls it with the engine's KV capacity;
// without it the mirror grows a shard at a time.
func (m *Mirror) Reserve(n int) { m.sy.Reserve(n) }

// Reset forgets every block.
func (m *Mirror) Reset() {
	m.sy.Reset()
	clear(m.media)
}

// Apply rewrites the events of one engine batch into Switchyard events and
// returns them; they are valid until the next Apply. Events the mirror
// cannot index are counted in Stats and left out; only a block-size
// mismatch is an error.
func (m *Mirror) Apply(b *enginewire.Batch) ([]kvevents.Event, error) {
	m.out = m.out[:0]
	m.hashes = m.hashes[:0]
	for i := range b.Events {
		e := &b.Events[i]
		if e.Skip != enginewire.SkipNone {
			m.stats.Skipped++
			continue
		}
		m.stats.Events++
		switch e.Kind {
		case enginewire.BlockStored:
			if err := m.stored(e); err != nil {
				return nil, err
			}
		case enginewire.BlockRemoved:
			m.stats.RemoveEvents++
			m.removed(e)
		case enginewire.AllBlocksCleared:
			m.stats.Clears++
			m.Reset()
			m.out = append(m.out, kvevents.Event{Kind: kvevents.Cleared})
		default:
			m.stats.Events--
			m.stats.UnknownKind++
		}
	}
	// Hashes slices were cut from m.hashes while it may have grown: point
	// them at the final backing array.
	off := 0
	for i := range m.out {
		n := len(m.out[i].Hashes)
		m.out[i].Hashes = m.hashes[off : off+n : off+n]
		off += n
	}
	return m.out, nil
}

func (m *Mirror) tierOf(e *enginewire.Event) kvevents.Tier {
	t, ok := TierOf(e.Medium)
	if !ok {
		m.stats.UnknownMedium++
	}
	return t
}

// addTier records that engine block eh (new or not) is held in tier t.
func (m *Mirror) addTier(eh uint64, existed bool, t kvevents.Tier) {
	bit := Media(1 << t)
	if !existed {
		if bit != gpuOnly {
			m.media[eh] = bit
		}
		return
	}
	cur, ok := m.media[eh]
	if !ok {
		cur = gpuOnly
	}
	if cur|bit != gpuOnly {
		m.media[eh] = cur | bit
	}
}

func (m *Mirror) stored(e *enginewire.Event) error {
	n := len(e.BlockHashes)
	if n == 0 {
		return nil
	}
	if e.BlockSize != m.blockSize {
		return fmt.Errorf("%w: event has block_size %d, bridge expects %d (run the engine with block size %d, SGLang --page-size %d, or give the bridge --block-size %d)",
			ErrBlockSize, e.BlockSize, m.blockSize, m.blockSize, m.blockSize, e.BlockSize)
	}
	bs := m.blockSize
	full := len(e.TokenIDs) / bs
	// vLLM sends exactly n full blocks; SGLang's last page may be partial.
	if full > n || len(e.TokenIDs) <= (n-1)*bs {
		m.stats.BadEvents++
		return nil
	}
	tier := m.tierOf(e)
	if m.offloaded(e, tier) {
		return nil
	}
	salt, err := m.extraKeys(e, n)
	if err != nil {
		m.stats.BadEvents++
		return nil
	}
	parent := kvindex.Root(salt)
	if e.HasParent {
		p, ok := m.sy.Get(e.Parent)
		switch {
		case !ok && e.Parent == 0:
			// No block has engine hash 0: the engine's way of writing
			// "no parent" (seen from vLLM-compatible engines).
		case !ok || p == 0:
			// The parent's event was lost, or was a partial page. The
			// chain is kept under a root of its own, from the parent's
			// engine hash: no prompt can match it, but the engine's later
			// blocks link to it and its removals are recognised, instead
			// of each one counting as an unknown removal.
			m.stats.Orphans++
			parent = orphanRoot(e.Parent, salt)
		default:
			parent = p
		}
	}
	start := len(m.hashes)
	firstParent := parent
	for i, eh := range e.BlockHashes {
		old, existed := m.sy.Get(eh)
		if i >= full {
			m.stats.Partial++
			if !existed {
				m.sy.Put(eh, 0)
			}
			m.addTier(eh, existed, tier)
			continue
		}
		p := parent
		if len(m.extra) > 0 && m.extra[i] != 0 {
			p = mixExtra(p, m.extra[i])
		}
		h := kvindex.HashBlock(p, e.TokenIDs[i*bs:(i+1)*bs])
		if h == 0 {
			h = 1 // 0 marks an unindexed entry
		}
		parent = h
		m.stats.StoredBlocks++
		if existed && old != h {
			// The engine reused a hash for other content (a restart
			// without PYTHONHASHSEED, or a collision): the new content
			// wins, in the tier of this event only.
			delete(m.media, eh)
			existed = false
		}
		m.sy.Put(eh, h)
		m.addTier(eh, existed, tier)
		m.hashes = append(m.hashes, h)
	}
	if len(m.hashes) > start {
		m.out = append(m.out, kvevents.Event{Kind: kvevents.Stored, Medium: tier, Parent: firstParent, Hashes: m.hashes[start:len(m.hashes)]})
	}
	return nil
}

// offloaded handles a BlockStored whose blocks are all held already, in
// other tiers: a copy to (or back from) another medium under the same
// engine hashes, as vLLM's offloading emits. Their Switchyard hashes are
// known, so the tokens are not read again.
func (m *Mirror) offloaded(e *enginewire.Event, tier kvevents.Tier) bool {
	bit := Media(1 << tier)
	for _, eh := range e.BlockHashes {
		if _, ok := m.sy.Get(eh); !ok || m.MediaOf(eh)&bit != 0 {
			return false
		}
	}
	start := len(m.hashes)
	for _, eh := range e.BlockHashes {
		m.addTier(eh, true, tier)
		if h, _ := m.sy.Get(eh); h != 0 {
			m.hashes = append(m.hashes, h)
		}
	}
	m.stats.StoredBlocks += uint64(len(e.BlockHashes))
	if len(m.hashes) > start {
		// Parent is unknown here and unused by the index.
		m.out = append(m.out, kvevents.Event{Kind: kvevents.Stored, Medium: tier, Hashes: m.hashes[start:len(m.hashes)]})
	}
	return true
}

func (m *Mirror) removed(e *enginewire.Event) {
	tier := m.tierOf(e)
	bit := Media(1 << tier)
	start := len(m.hashes)
	for _, eh := range e.BlockHashes {
		h, ok := m.sy.Get(eh)
		md := m.MediaOf(eh)
		if !ok || md&bit == 0 {
			m.stats.UnknownRemoved++
			continue
		}
		m.stats.RemovedBlocks++
		md &^= bit
		switch {
		case md == 0:
			m.sy.Delete(eh)
			delete(m.media, eh)
		case md == gpuOnly:
			delete(m.media, eh)
		default:
			m.media[eh] = md
		}
		if h != 0 {
			// Another engine block with the same content may still hold
			// it: the index then under-counts, the safe side.
			m.hashes = append(m.hashes, h)
		}
	}
	if len(m.hashes) > start {
		m.out = append(m.out, kvevents.Event{Kind: kvevents.Removed, Medium: tier, Hashes: m.hashes[start:len(m.hashes)]})
	}
}

// extraKeys reads e's extra_keys. It returns the cache salt (from the first
// block, or SGLang's cache_salt field) and leaves in m.extra a digest per
// block of every other extra key (multimodal ids, prompt-embedding digests),
// 0 for a block with none. vLLM's first block carries
// [lora_name?, mm ids…, cache_salt?, embeds…]: a lone string after the LoRA
// name is the salt, which is what the frontend seeds its chain with;
// anything richer becomes a digest the frontend cannot reproduce, so such
// blocks never match a text-only prompt, which is the safe side. A LoRA
// adapter's blocks get a root of their own.
func (m *Mirror) extraKeys(e *enginewire.Event, n int) (string, error) {
	m.extra = m.extra[:0]
	salt := e.CacheSalt
	if e.RawExtraKeys != nil {
		for range n {
			m.extra = append(m.extra, 0)
		}
		var first []byte
		items0 := 0
		err := e.ForEachExtraKey(func(block int, item, str []byte) {
			if block >= n || (str != nil && string(str) == e.LoraName && e.LoraName != "") {
				return
			}
			if block == 0 {
				first = item
				items0++
			}
			m.extra[block] = foldBytes(m.extra[block], item)
		})
		if err != nil {
			return "", err
		}
		if items0 == 1 && (first[0]&0xe0 == 0xa0 || first[0] >= 0xd9 && first[0] <= 0xdb) && salt == "" {
			// A lone string: the cache_salt. Strip the msgpack header.
			s := first
			switch {
			case s[0]&0xe0 == 0xa0:
				salt = string(s[1:])
			case s[0] == 0xd9:
				salt = string(s[2:])
			case s[0] == 0xda:
				salt = string(s[3:])
			default:
				salt = string(s[5:])
			}
			m.extra[0] = 0
		}
	}
	switch {
	case e.LoraName != "":
		salt = kvindex.LoRASalt(e.LoraName, salt)
	case e.LoraID != 0:
		// An engine that names adapters by id only: a root of their own
		// (never the base model's), which no prompt matches until the
		// frontend knows the adapter by that id.
		salt = kvindex.LoRASalt("#"+strconv.FormatInt(e.LoraID, 10), salt)
	}
	return salt, nil
}

// orphanRoot is the root a chain whose parent block is unknown is hashed
// under: one per parent engine hash (and salt), so the same orphan chain
// always gets the same Switchyard hashes, none of which a prompt's chain
// (from kvindex.Root) can reach.
func orphanRoot(parent uint64, salt string) uint64 {
	return kvindex.Mix(kvindex.Root(salt) ^ kvindex.Mix(parent^0x0ff5e7_0ff5e7))
}

// foldBytes mixes b into h (FNV-1a, never returning 0).
func foldBytes(h uint64, b []byte) uint64 {
	if h == 0 {
		h = 14695981039346656037
	}
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	if h == 0 {
		h = 1
	}
	return h
}

// mixExtra folds a block's extra-key digest into its parent hash, so blocks
// with the same tokens but other images (or embeddings) differ.
func mixExtra(parent, digest uint64) uint64 {
	return kvindex.HashBlock(parent^0x6d6d, []uint32{uint32(digest), uint32(digest >> 32)})
}
