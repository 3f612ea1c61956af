package kvindex

import "slices"

// Hit is one worker's overlap with a prompt.
type Hit struct {
	ID     WorkerID
	Worker string
	Blocks int // leading blocks of the chain the worker holds, ≥ 1
}

// Overlaps is the reusable result of Index.Overlaps. The zero value is
// ready to use. Reusing one Overlaps across lookups makes them
// allocation-free once its buffers have grown to the index's worker count.
// An Overlaps is not safe for concurrent use; keep one per goroutine or in a
// sync.Pool.
type Overlaps struct {
	// Hits lists every worker holding at least the chain's first block, in
	// ascending order of Blocks.
	Hits []Hit

	alive, next, set []WorkerID
	lines            []*line  // home lines of the current prefetch window; cleared after each lookup
	mark             []uint32 // by WorkerID: stamp of the block whose holders were marked
	stamp            uint32
	blocks           []int32  // by WorkerID: overlap, valid when seen[id] == call
	seen             []uint32 // by WorkerID
	call             uint32
}

// Blocks returns the overlap of the worker with the given ID in the last
// lookup: O(1).
func (o *Overlaps) Blocks(id WorkerID) int {
	if int(id) < len(o.seen) && o.seen[id] == o.call {
		return int(o.blocks[id])
	}
	return 0
}

// Max returns the longest overlap of the last lookup.
func (o *Overlaps) Max() int {
	if len(o.Hits) == 0 {
		return 0
	}
	return o.Hits[len(o.Hits)-1].Blocks
}

func (o *Overlaps) reset(nIDs int) {
	o.Hits = o.Hits[:0]
	if len(o.seen) < nIDs {
		o.seen = make([]uint32, nIDs)
		o.blocks = make([]int32, nIDs)
		o.mark = make([]uint32, nIDs)
		o.call, o.stamp = 0, 0
	}
	o.call++
	if o.call == 0 { // wrapped: old stamps could read as current
		clear(o.seen)
		o.call = 1
	}
}

func (o *Overlaps) hit(names []string, id WorkerID, blocks int) {
	o.Hits = append(o.Hits, Hit{ID: id, Worker: names[id], Blocks: blocks})
	o.seen[id] = o.call
	o.blocks[id] = int32(blocks)
}

// Overlaps fills out with, for every worker, the number of leading blocks of
// the hash chain it holds: a worker missing block i has overlap i even if it
// holds later blocks. One pass from block 0 keeps the set of workers that
// held every block so far and stops when it is empty, so a cold prompt costs
// one probe. Lock-free and allocation-free with a warm out; it may run
// concurrently with any writer and then sees each block either before or
// after a concurrent change.
func (x *Index) Overlaps(hashes []uint64, out *Overlaps) {
	names := *x.names.Load()
	out.reset(len(names))
	if len(hashes) == 0 {
		return
	}
	out.alive = x.readSet(slotKey(hashes[0]), out.alive[:0])
	// Keep only workers of this lookup's name snapshot: one registered since
	// has no name here, and later blocks only narrow the set.
	alive := out.alive[:0]
	for _, w := range out.alive {
		if int(w) < len(names) && names[w] != "" {
			alive = append(alive, w)
		}
	}
	// The walk keeps its two worker lists in locals: writing them back to
	// out every block put a store-to-load round trip on the critical path.
	next := out.next[:0]
	if cap(out.lines) < prefetchWindow {
		out.lines = make([]*line, prefetchWindow)
	}
	lines := out.lines[:prefetchWindow]
	win, base := 1, 1 // blocks [base, win) have their home lines in lines
	for i := 1; i < len(hashes) && len(alive) > 0; i++ {
		if i >= win {
			// Prefetch the next window, doubling it each time (8, 16, …,
			// 128) so a prompt that stops matching early wastes little.
			end := min(len(hashes), i+min(max(8, 2*(win-1)), prefetchWindow))
			x.prefetch(hashes[i:end], lines)
			win, base = end, i
		}
		if len(alive) == 1 {
			// The common case, one worker matching: skip the blocks it
			// holds in a tight loop; stop at the first it may not hold.
			i += x.matchRun(hashes[i:win], lines[i-base:win-base], alive[0])
			if i >= win {
				i-- // the loop's i++ moves to the next window
				continue
			}
		}
		k := slotKey(hashes[i])
		s := x.shardOf(k)
		s1 := s.seq.Load()
		head, ok := lines[i-base].scan(k)
		if !ok || s1&1 != 0 || s.seq.Load() != s1 {
			head = x.readHead(k)
		}
		n := int(lane(head, 3))
		next = next[:0]
		switch {
		case head == 0 || n&contFlag != 0:
			for _, w := range alive {
				out.hit(names, w, i)
			}
		case n <= idsPerSlot:
			a, b, c := WorkerID(lane(head, 0)), WorkerID(lane(head, 1)), WorkerID(lane(head, 2))
			for _, w := range alive {
				if w == a || w == b || w == c {
					next = append(next, w)
				} else {
					out.hit(names, w, i)
				}
			}
		default:
			out.set = x.readSet(k, out.set[:0])
			next = out.intersect(names, alive, next, i)
		}
		alive, next = next, alive
	}
	for _, w := range alive {
		out.hit(names, w, len(hashes))
	}
	out.alive, out.next = alive[:0], next[:0]
	// Drop the line pointers so a table replaced since is not kept alive.
	clear(lines)
}

// prefetchWindow is the most blocks one prefetch pass covers. 128 home lines
// (8 KiB) stay in L1 until the walk reads them. 64, 256 and 512 measured
// within the noise of 128 (11–19 µs medians on the shared box), so the
// smaller cache footprint wins.
const prefetchWindow = 128

// intersect appends to next the members of alive that are in out.set, the
// holders of block i, and records a hit at i for the others. Small sets (the
// common four to six holders against a few alive workers) are compared
// directly; large ones by stamping their members in out.mark.
func (out *Overlaps) intersect(names []string, alive, next []WorkerID, i int) []WorkerID {
	if len(alive)*len(out.set) <= 64 {
		for _, w := range alive {
			if slices.Contains(out.set, w) {
				next = append(next, w)
			} else {
				out.hit(names, w, i)
			}
		}
		return next
	}
	out.stamp++
	if out.stamp == 0 {
		clear(out.mark)
		out.stamp = 1
	}
	for _, w := range out.set {
		if int(w) < len(out.mark) {
			out.mark[w] = out.stamp
		}
	}
	for _, w := range alive {
		if out.mark[w] == out.stamp {
			next = append(next, w)
		} else {
			out.hit(names, w, i)
		}
	}
	return next
}

// prefetch records the home line of every hash in lines and then loads one
// word of each, in two passes. The first pass does the address arithmetic
// (shard, table, home slot) without touching memory the caches lack; the
// second is a tight loop of independent loads, so many cache misses are in
// flight at once: each load that waits holds a reorder-buffer entry, and at
// ~25 instructions per hash the single-pass loop kept only a third as many
// misses outstanding. Measured with perf on the 10 M-block index (shared
// 2-core box): the single pass spent ~13 µs of a 24 µs median lookup
// stalled on its loads; two passes took the median to 18–22 µs.
//
// A block's continuation slots share its home line (see contKey), so one
// load per block covers sets of any common size. The lines stay valid even
// if a grow replaces a table meanwhile: a replaced table is never written
// again, and the walk validates every read with the shard's seq.
func (x *Index) prefetch(hashes []uint64, lines []*line) {
	lines = lines[:len(hashes)]
	for j, h := range hashes {
		k := slotKey(h)
		lines[j] = x.shardOf(k).tab.Load().lineOf(k)
	}
	var sink uint64
	for _, l := range lines {
		sink += l[0].loadKey()
	}
	touchSink.Store(sink)
}

// matchRun returns how many leading blocks of hashes, whose home lines are in
// lines, are held by worker w in a set of at most three holders, read
// consistently. It stops at the first block that needs the general walk: not
// held by w, more holders, a writer active or a probe run leaving the line.
// A loop this small keeps its state in registers; the general walk spilled
// to the stack. Measured median one-holder lookup on the 10 M-block index
// (shared 2-core box): ~24 µs with the general walk, ~18 µs with matchRun
// calling line.scan, ~15 µs with the scan inlined.
func (x *Index) matchRun(hashes []uint64, lines []*line, w WorkerID) int {
	const ones = 0x0000_0001_0001_0001 // lanes 0–2
	const highs = 0x0000_8000_8000_8000
	ww := uint64(w) * ones
	for j, h := range hashes {
		k := slotKey(h)
		s := x.shardOf(k)
		s1 := s.seq.Load()
		// line.scan, inlined by hand (it is over the compiler's budget):
		// the call cost ~5 ns a block with its spills.
		l := lines[j]
		k0, k1, k2, k3 := l[0].loadKey(), l[1].loadKey(), l[2].loadKey(), l[3].loadKey()
		v0, v1, v2, v3 := l[0].loadVal(), l[1].loadVal(), l[2].loadVal(), l[3].loadVal()
		v := uint64(0)
		if k3 == k {
			v = v3
		}
		if k2 == k {
			v = v2
		}
		if k1 == k {
			v = v1
		}
		if k0 == k {
			v = v0
		}
		// v == 0 when k is not in the line: no head value is 0 (lane 3
		// holds the set size), so no separate hit flag is needed.
		if v == 0 || s1&1 != 0 || s.seq.Load() != s1 {
			return j
		}
		// Held iff the set has 1–3 members and one of lanes 0–2 equals w:
		// the lane XOR w is zero there (a SWAR zero-lane test, exact about
		// whether any lane is zero).
		d := (v ^ ww) & (ones * 0xffff)
		if n := v >> 48; n-1 >= idsPerSlot || (d-ones)&^d&highs == 0 {
			return j
		}
	}
	return len(hashes)
}
