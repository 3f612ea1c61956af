package tokenizer

import (
	"math"
	"sync"
)

// noRank marks a pair that is not a token.
const noRank = math.MaxUint32

// part is one boundary of a piece under merge: the part starts at byte
// pos, and rank is the rank of the pair it forms with the next part
// (noRank if none).
type part struct {
	pos  int
	rank uint32
}

// heapMinPiece is the piece length from which the merge uses a heap
// instead of rescanning every pair per merge. The rescan is quadratic but
// cheaper for short pieces; both give the same merges (lowest rank first,
// leftmost on ties), which TestBPEHeapMatchesScan pins.
const heapMinPiece = 128

// appendPiece appends the tokens of one pre-tokenized piece to dst.
func (v *vocab) appendPiece(dst []uint32, piece string) []uint32 {
	if id, ok := v.rank(piece); ok {
		return append(dst, id)
	}
	if len(piece) >= heapMinPiece {
		return v.appendMergedHeap(dst, piece)
	}
	var stack [heapMinPiece + 1]part
	return v.appendMergedScan(dst, piece, stack[:0])
}

// rankOf is the rank of piece[parts[i].pos:parts[i+2].pos], the pair
// starting at part i, or noRank.
func (v *vocab) rankOf(piece string, parts []part, i int) uint32 {
	if i+2 >= len(parts) {
		return noRank
	}
	if id, ok := v.rank(piece[parts[i].pos:parts[i+2].pos]); ok {
		return id
	}
	return noRank
}

// appendMergedScan is tiktoken's byte-pair merge: repeatedly merge the
// adjacent pair with the lowest rank, the leftmost one on ties, until no
// pair is a token. parts is scratch space.
func (v *vocab) appendMergedScan(dst []uint32, piece string, parts []part) []uint32 {
	for i := 0; i <= len(piece); i++ {
		parts = append(parts, part{pos: i, rank: noRank})
	}
	for i := range len(parts) - 2 {
		parts[i].rank = v.rankOf(piece, parts, i)
	}
	for len(parts) > 1 {
		minRank, at := uint32(noRank), -1
		for i := range len(parts) - 1 {
			if parts[i].rank < minRank {
				minRank, at = parts[i].rank, i
			}
		}
		if at < 0 {
			break
		}
		// Part at+1 disappears; the pairs starting at at and at-1 grow.
		parts = append(parts[:at+1], parts[at+2:]...)
		parts[at].rank = v.rankOf(piece, parts, at)
		if at > 0 {
			parts[at-1].rank = v.rankOf(piece, parts, at-1)
		}
	}
	for i := range len(parts) - 1 {
		id, _ := v.rank(piece[parts[i].pos:parts[i+1].pos])
		dst = append(dst, id)
	}
	return dst
}

// appendMergedHeap gives the same merges as appendMergedScan in
// O(n log n) for long pieces: a 10,000-byte dash rule takes ~5 ms here
// against ~216 ms in tiktoken-go (BenchmarkEncodeLongRun), and the scan
// grows quadratically from there. Parts form a linked list;
// the heap holds (rank, start) candidates, validated lazily when popped:
// a part's pair only ever grows, so its rank never returns to an earlier
// value and a stale entry never matches the part's current rank.
func (v *vocab) appendMergedHeap(dst []uint32, piece string) []uint32 {
	n := len(piece)
	st := mergePool.Get().(*mergeState)
	defer mergePool.Put(st)
	st.reset(n)
	next, prev, rank := st.next, st.prev, st.rank
	pairRank := func(i int) uint32 {
		j := next[i]
		if j >= n {
			return noRank
		}
		k := next[j]
		if id, ok := v.rank(piece[i:k]); ok {
			return id
		}
		return noRank
	}
	for i := range n {
		if rank[i] = pairRank(i); rank[i] != noRank {
			st.h = append(st.h, cand{rank: rank[i], pos: i})
		}
	}
	st.h.init()
	for len(st.h) > 0 {
		c := st.h.pop()
		i := c.pos
		if rank[i] != c.rank { // stale, or part i was merged away (rank set to noRank)
			continue
		}
		j := next[i]
		next[i] = next[j]
		if next[j] < n {
			prev[next[j]] = i
		}
		rank[j] = noRank
		if rank[i] = pairRank(i); rank[i] != noRank {
			st.h.push(cand{rank: rank[i], pos: i})
		}
		if p := prev[i]; p >= 0 {
			if rank[p] = pairRank(p); rank[p] != noRank {
				st.h.push(cand{rank: rank[p], pos: p})
			}
		}
	}
	for i := 0; i < n; i = next[i] {
		id, _ := v.rank(piece[i:next[i]])
		dst = append(dst, id)
	}
	return dst
}

// cand is a merge candidate: the pair starting at byte pos has rank.
type cand struct {
	rank uint32
	pos  int
}

// candHeap is a binary min-heap of candidates by rank, then leftmost
// first, which is the order tiktoken merges in. Hand-rolled rather than
// container/heap so pushes do not box each candidate into an interface.
type candHeap []cand

func (h candHeap) less(a, b int) bool {
	if h[a].rank != h[b].rank {
		return h[a].rank < h[b].rank
	}
	return h[a].pos < h[b].pos
}

func (h candHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *candHeap) push(c cand) {
	*h = append(*h, c)
	h.up(len(*h) - 1)
}

func (h *candHeap) pop() cand {
	old := *h
	top := old[0]
	last := len(old) - 1
	old[0] = old[last]
	*h = old[:last]
	h.down(0)
	return top
}

func (h candHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (h candHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// mergeState is the scratch space of appendMergedHeap, pooled because
// long pieces would otherwise allocate several slices each.
type mergeState struct {
	next, prev []int
	rank       []uint32
	h          candHeap
}

var mergePool = sync.Pool{New: func() any { return new(mergeState) }}

func (st *mergeState) reset(n int) {
	if cap(st.next) < n {
		st.next = make([]int, n)
		st.prev = make([]int, n)
		st.rank = make([]uint32, n)
	}
	st.next, st.prev, st.rank = st.next[:n], st.prev[:n], st.rank[:n]
	for i := range n {
		st.next[i] = i + 1
		st.prev[i] = i - 1
	}
	st.h = st.h[:0]
}
