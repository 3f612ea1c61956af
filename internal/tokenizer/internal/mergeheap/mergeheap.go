// Package mergeheap is the working space of byte-pair merging over long
// pieces, shared by the cl100k tokenizer (internal/tokenizer) and the
// HuggingFace one (internal/tokenizer/hf): a min-heap of merge candidates
// and the linked list of symbols they merge, pooled.
//
// Both tokenizers merge the same way: repeatedly the adjacent pair with
// the lowest rank, the leftmost on ties. A heap does it in O(n log n);
// they rescan all pairs instead for short pieces, where that is cheaper.
// The heap is validated lazily: a candidate popped whose pair has since
// changed is skipped by the caller.
package mergeheap

import "sync"

// Cand is a merge candidate: the pair starting at symbol Pos has Rank.
type Cand struct {
	Rank uint32
	Pos  int
}

// Heap is a binary min-heap of candidates by rank, then leftmost first,
// which is the order BPE merges in. Hand-rolled rather than
// container/heap so pushes do not box each candidate into an interface.
type Heap []Cand

func (h Heap) less(a, b int) bool {
	if h[a].Rank != h[b].Rank {
		return h[a].Rank < h[b].Rank
	}
	return h[a].Pos < h[b].Pos
}

// Init orders candidates appended without Push, in O(n).
func (h Heap) Init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// Push adds c.
func (h *Heap) Push(c Cand) {
	*h = append(*h, c)
	h.up(len(*h) - 1)
}

// Pop removes and returns the least candidate; the heap must not be
// empty.
func (h *Heap) Pop() Cand {
	old := *h
	top := old[0]
	last := len(old) - 1
	old[0] = old[last]
	*h = old[:last]
	h.down(0)
	return top
}

func (h Heap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (h Heap) down(i int) {
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

// Scratch is the working space of one merge over n symbols: a doubly
// linked list (Next, Prev), per-symbol slices for the caller (Rank, Sym,
// Mid) and an empty heap. Get it from the pool and Put it back, so long
// pieces allocate nothing once the pool is warm. Not safe for concurrent
// use; each merge takes its own.
type Scratch struct {
	Next, Prev     []int
	Rank, Sym, Mid []uint32
	Heap           Heap
}

var pool = sync.Pool{New: func() any { return new(Scratch) }}

// Get returns a Scratch for n symbols with Next[i] = i+1, Prev[i] = i-1
// and an empty heap; Rank, Sym and Mid hold garbage.
func Get(n int) *Scratch {
	s := pool.Get().(*Scratch)
	if cap(s.Next) < n {
		s.Next = make([]int, n)
		s.Prev = make([]int, n)
		s.Rank = make([]uint32, n)
		s.Sym = make([]uint32, n)
		s.Mid = make([]uint32, n)
	}
	s.Next, s.Prev = s.Next[:n], s.Prev[:n]
	s.Rank, s.Sym, s.Mid = s.Rank[:n], s.Sym[:n], s.Mid[:n]
	for i := range n {
		s.Next[i] = i + 1
		s.Prev[i] = i - 1
	}
	s.Heap = s.Heap[:0]
	return s
}

// Put returns s to the pool; s must not be used after.
func Put(s *Scratch) { pool.Put(s) }
