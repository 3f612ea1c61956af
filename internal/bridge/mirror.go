package bridge

import (
	"errors"
	"fmt"

	"github.com/switchyard-llm/switchyard/internal/enginewire"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

// Media is a set of enginewire.Medium values, one bit each: where the engine
// holds one block. A block is held while any bit is set.
type Media uint8

// Has says whether m includes medium.
func (m Media) Has(medium enginewire.Medium) bool { return m&(1<<medium) != 0 }

// Fastest is the fastest medium in m (GPU before CPU before disk); an
// unknown medium counts as the slowest, never as GPU.
func (m Media) Fastest() enginewire.Medium {
	for _, md := range [...]enginewire.Medium{enginewire.MediumGPU, enginewire.MediumCPU, enginewire.MediumDisk, enginewire.MediumUnknown} {
		if m.Has(md) {
			return md
		}
	}
	return enginewire.MediumUnknown
}

// entry is what the mirror knows of one engine block: its Switchyard hash
// and the media holding it. sy is 0 for a block that is not indexed (a
// partial SGLang page), kept so its removal is recognised.
type entry struct {
	sy    uint64
	media Media
}

// Stats counts what a Mirror did with engine events. Every field only grows.
type Stats struct {
	Events         uint64 // events applied
	StoredBlocks   uint64 // full blocks stored (every medium)
	RemovedBlocks  uint64 // engine blocks removed from a medium
	Clears         uint64 // AllBlocksCleared
	Skipped        uint64 // events of another KV group or attention kind
	UnknownKind    uint64 // events of a type this bridge does not know
	UnknownRemoved uint64 // BlockRemoved hashes the mirror did not hold
	Orphans        uint64 // BlockStored events whose parent the mirror did not hold (not indexed)
	Partial        uint64 // blocks with fewer tokens than the block size (not indexed)
	UnknownMedium  uint64 // events naming a medium this bridge does not know (indexed as disk)
	BadEvents      uint64 // events inconsistent in themselves (token count, extra keys)
}

// ErrBlockSize is returned when an event's block size is not the one the
// bridge was configured with: Switchyard's hashes would then never match
// the frontend's, so the bridge must stop rather than index garbage.
var ErrBlockSize = errors.New("bridge: engine block size differs from --block-size")

// Mirror is one engine's block set, keyed by the engine's hashes, together
// with the Switchyard hash each was rewritten to. It is not safe for
// concurrent use: the bridge guards it with its lock.
//
// Memory: two Go maps, 89 bytes of heap per block at 1M blocks (measured
// with BenchmarkMirrorRSS; both maps sit just past a power-of-two growth).
type Mirror struct {
	blockSize int
	entries   map[uint64]entry  // engine hash → entry
	held      map[uint64]uint32 // Switchyard hash → engine entries that map to it
	out       []kvevents.Event
	hashes    []uint64 // backing store for out's Hashes
	extra     []uint64 // per-block extra-key digests of the event being applied
	stats     Stats
}

// NewMirror returns an empty mirror for engines with the given block size.
func NewMirror(blockSize int) *Mirror {
	return &Mirror{blockSize: blockSize, entries: make(map[uint64]entry), held: make(map[uint64]uint32)}
}

// Stats returns the counters.
func (m *Mirror) Stats() Stats { return m.stats }

// Len is the number of engine blocks held, on any medium.
func (m *Mirror) Len() int { return len(m.entries) }

// Indexed is the number of distinct Switchyard hashes held.
func (m *Mirror) Indexed() int { return len(m.held) }

// MediaOf returns the media holding the engine block h, or 0.
func (m *Mirror) MediaOf(h uint64) Media { return m.entries[h].media }

// Hashes calls fn with every Switchyard hash held, in chunks.
func (m *Mirror) Hashes(fn func([]uint64)) {
	buf := make([]uint64, 0, 4096)
	for h := range m.held {
		buf = append(buf, h)
		if len(buf) == cap(buf) {
			fn(buf)
			buf = buf[:0]
		}
	}
	fn(buf)
}

// Reset forgets every block.
func (m *Mirror) Reset() {
	clear(m.entries)
	clear(m.held)
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

func mediumOf(e *enginewire.Event, st *Stats) Media {
	md := e.Medium
	if md == enginewire.MediumUnknown {
		st.UnknownMedium++
	}
	return 1 << md
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
	media := mediumOf(e, &m.stats)
	salt, err := m.extraKeys(e, n)
	if err != nil {
		m.stats.BadEvents++
		return nil
	}
	parent := kvindex.Root(salt)
	if e.HasParent {
		pe, ok := m.entries[e.Parent]
		if !ok || pe.sy == 0 {
			m.stats.Orphans++
			return nil
		}
		parent = pe.sy
	}
	start := len(m.hashes)
	firstParent := parent
	for i, eh := range e.BlockHashes {
		if i >= full {
			m.stats.Partial++
			old, ok := m.entries[eh]
			if !ok {
				m.entries[eh] = entry{media: media}
			} else {
				old.media |= media
				m.entries[eh] = old
			}
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
		old, ok := m.entries[eh]
		switch {
		case !ok:
			m.entries[eh] = entry{sy: h, media: media}
			m.held[h]++
		case old.sy != h:
			// The engine reused a hash for other content (a restart
			// without PYTHONHASHSEED, or a collision): the new content
			// wins.
			m.release(old.sy)
			m.entries[eh] = entry{sy: h, media: media}
			m.held[h]++
		default:
			old.media |= media
			m.entries[eh] = old
		}
		m.hashes = append(m.hashes, h)
	}
	if len(m.hashes) > start {
		m.out = append(m.out, kvevents.Event{Kind: kvevents.Stored, Parent: firstParent, Hashes: m.hashes[start:len(m.hashes)]})
	}
	return nil
}

// release drops one engine entry's claim on a Switchyard hash and reports
// whether the worker no longer holds it.
func (m *Mirror) release(sy uint64) bool {
	if sy == 0 {
		return false
	}
	c := m.held[sy]
	if c <= 1 {
		delete(m.held, sy)
		return true
	}
	m.held[sy] = c - 1
	return false
}

func (m *Mirror) removed(e *enginewire.Event) {
	media := mediumOf(e, &m.stats)
	start := len(m.hashes)
	for _, eh := range e.BlockHashes {
		old, ok := m.entries[eh]
		if !ok || old.media&media == 0 {
			m.stats.UnknownRemoved++
			continue
		}
		m.stats.RemovedBlocks++
		old.media &^= media
		if old.media != 0 {
			m.entries[eh] = old
			continue
		}
		delete(m.entries, eh)
		if m.release(old.sy) {
			m.hashes = append(m.hashes, old.sy)
		}
	}
	if len(m.hashes) > start {
		m.out = append(m.out, kvevents.Event{Kind: kvevents.Removed, Hashes: m.hashes[start:len(m.hashes)]})
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
	if e.LoraName != "" {
		salt = "lora\x00" + e.LoraName + "\x00" + salt
	}
	return salt, nil
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
