package hf

import (
	"math"

	"github.com/switchyard-llm/switchyard/internal/tokenizer/internal/mergeheap"
)

const noRank = math.MaxUint32

// appendBPE appends the tokens of one pre-tokenized piece (raw bytes):
// merges are applied lowest rank first, leftmost first among equal ranks,
// as HuggingFace tokenizers and transformers.js do. Short pieces go
// through the piece cache.
func (t *Tokenizer) appendBPE(dst []uint32, piece string) []uint32 {
	if len(piece) == 1 { // a single byte is its own token (Qwen's digits)
		return append(dst, t.byteID[piece[0]])
	}
	if t.cache == nil || len(piece) > cacheKeyMax {
		return t.appendBPEUncached(dst, piece)
	}
	k := makeKey(piece)
	if out, ok := t.cache.get(dst, &k); ok {
		return out
	}
	start := len(dst)
	dst = t.appendBPEUncached(dst, piece)
	if n := len(dst) - start; n <= cacheIDMax {
		t.cache.put(&k, dst[start:])
	}
	return dst
}

// appendBPEUncached is appendBPE without the cache.
func (t *Tokenizer) appendBPEUncached(dst []uint32, piece string) []uint32 {
	if id, ok := t.vocab[piece]; ok && (t.ignoreMerges || t.reachable(id, piece)) {
		return append(dst, id)
	}
	return t.merge(dst, piece)
}

// reachable reports whether merging piece, which is the token id, gives
// that one token. Almost always true, but a vocabulary may hold tokens
// its merges never build; the answer is cached per id.
func (t *Tokenizer) reachable(id uint32, piece string) bool {
	switch t.reach[id].Load() {
	case 1:
		return true
	case 2:
		return false
	}
	var one [1]uint32
	got := t.merge(one[:0], piece)
	ok := len(got) == 1 && got[0] == id
	if ok {
		t.reach[id].Store(1)
	} else {
		t.reach[id].Store(2)
	}
	return ok
}

// pairRank is the rank and merged id of the pair (a, b).
func (t *Tokenizer) pairRank(a, b uint32) (rank, id uint32) {
	v, ok := t.merges.get(uint64(a)<<32 | uint64(b))
	if !ok {
		return noRank, 0
	}
	return uint32(v >> 32), uint32(v)
}

// scanMax is the piece length up to which merge rescans all pairs per
// merge (quadratic, but cheap and allocation-free for short pieces);
// longer pieces use a heap.
const scanMax = 64

func (t *Tokenizer) merge(dst []uint32, piece string) []uint32 {
	n := len(piece)
	if n == 1 {
		return append(dst, t.byteID[piece[0]])
	}
	if n > scanMax {
		return t.mergeHeap(dst, piece)
	}
	var symArr, rankArr, idArr [scanMax]uint32
	sym, rank, mid := symArr[:n], rankArr[:n], idArr[:n]
	for i := range n {
		sym[i] = t.byteID[piece[i]]
	}
	for i := range n - 1 {
		rank[i], mid[i] = t.pairRank(sym[i], sym[i+1])
	}
	rank[n-1] = noRank
	for n > 1 {
		best, at := uint32(noRank), -1
		for i := range n - 1 {
			if rank[i] < best {
				best, at = rank[i], i
			}
		}
		if at < 0 {
			break
		}
		sym[at] = mid[at]
		copy(sym[at+1:n-1], sym[at+2:n])
		copy(rank[at+1:n-1], rank[at+2:n])
		copy(mid[at+1:n-1], mid[at+2:n])
		n--
		rank[n-1] = noRank
		if at+1 < n {
			rank[at], mid[at] = t.pairRank(sym[at], sym[at+1])
		} else {
			rank[at] = noRank
		}
		if at > 0 {
			rank[at-1], mid[at-1] = t.pairRank(sym[at-1], sym[at])
		}
	}
	return append(dst, sym[:n]...)
}

// mergeHeap gives the same merges as merge in O(n log n) for long pieces.
// Symbols form a linked list over byte positions; the heap holds (rank,
// position) candidates, checked when popped against the symbol's current
// pair (a stale entry no longer matches).
func (t *Tokenizer) mergeHeap(dst []uint32, piece string) []uint32 {
	n := len(piece)
	st := mergeheap.Get(n)
	defer mergeheap.Put(st)
	sym, next, prev, rank, mid := st.Sym, st.Next, st.Prev, st.Rank, st.Mid
	for i := range n {
		sym[i] = t.byteID[piece[i]]
	}
	set := func(i int) {
		j := next[i]
		if j >= n {
			rank[i] = noRank
			return
		}
		rank[i], mid[i] = t.pairRank(sym[i], sym[j])
		if rank[i] != noRank {
			st.Heap.Push(mergeheap.Cand{Rank: rank[i], Pos: i})
		}
	}
	for i := range n {
		set(i)
	}
	for len(st.Heap) > 0 {
		c := st.Heap.Pop()
		i := c.Pos
		if sym[i] == noRank || rank[i] != c.Rank {
			continue
		}
		j := next[i]
		sym[i] = mid[i]
		sym[j] = noRank
		next[i] = next[j]
		if next[j] < n {
			prev[next[j]] = i
		}
		set(i)
		if p := prev[i]; p >= 0 {
			set(p)
		}
	}
	for i := 0; i < n; i = next[i] {
		dst = append(dst, sym[i])
	}
	return dst
}
