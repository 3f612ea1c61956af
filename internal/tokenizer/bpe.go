package tokenizer

import (
	"math"

	"github.com/switchyard-llm/switchyard/internal/tokenizer/internal/mergeheap"
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
	st := mergeheap.Get(n)
	defer mergeheap.Put(st)
	next, prev, rank := st.Next, st.Prev, st.Rank
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
			st.Heap = append(st.Heap, mergeheap.Cand{Rank: rank[i], Pos: i})
		}
	}
	st.Heap.Init()
	for len(st.Heap) > 0 {
		c := st.Heap.Pop()
		i := c.Pos
		if rank[i] != c.Rank { // stale, or part i was merged away (rank set to noRank)
			continue
		}
		j := next[i]
		next[i] = next[j]
		if next[j] < n {
			prev[next[j]] = i
		}
		rank[j] = noRank
		if rank[i] = pairRank(i); rank[i] != noRank {
			st.Heap.Push(mergeheap.Cand{Rank: rank[i], Pos: i})
		}
		if p := prev[i]; p >= 0 {
			if rank[p] = pairRank(p); rank[p] != noRank {
				st.Heap.Push(mergeheap.Cand{Rank: rank[p], Pos: p})
			}
		}
	}
	for i := 0; i < n; i = next[i] {
		id, _ := v.rank(piece[i:next[i]])
		dst = append(dst, id)
	}
	return dst
}
