package kvindex

import "math/bits"

// Hit is one worker's overlap with a prompt.
type Hit struct {
	ID     WorkerID
	Worker string
	Blocks int // leading blocks of the chain the worker holds, ≥ 1
	// Tiers counts those blocks by the fastest tier the worker holds each
	// in; they sum to Blocks.
	Tiers TierCounts
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

	alive, next []WorkerID
	set         []uint16 // members (ID and tier mask) of one block's holder set
	lines       []*line  // home lines of the current prefetch window; cleared after each lookup
	mark        []uint32 // by WorkerID: stamp of the block whose holders were marked
	stamp       uint32
	blocks      []int32      // by WorkerID: overlap, valid when seen[id] == call
	tiers       []TierCounts // by WorkerID: blocks per tier so far, valid for alive workers and hits
	seen        []uint32     // by WorkerID
	call        uint32
}

// Blocks returns the overlap of the worker with the given ID in the last
// lookup: O(1).
func (o *Overlaps) Blocks(id WorkerID) int {
	if int(id) < len(o.seen) && o.seen[id] == o.call {
		return int(o.blocks[id])
	}
	return 0
}

// Tiers returns the per-tier split of the overlap of the worker with the
// given ID in the last lookup: O(1).
func (o *Overlaps) Tiers(id WorkerID) TierCounts {
	if int(id) < len(o.seen) && o.seen[id] == o.call {
		return o.tiers[id]
	}
	return TierCounts{}
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
		o.tiers = make([]TierCounts, nIDs)
		o.call, o.stamp = 0, 0
	}
	o.call++
	if o.call == 0 { // wrapped: old stamps could read as current
		clear(o.seen)
		o.call = 1
	}
}

func (o *Overlaps) hit(names []string, id WorkerID, blocks int) {
	o.Hits = append(o.Hits, Hit{ID: id, Worker: names[id], Blocks: blocks, Tiers: o.tiers[id]})
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
	out.set = x.readSet(slotKey(hashes[0]), out.set[:0])
	// Keep only workers of this lookup's name snapshot: one registered since
	// has no name here, and later blocks only narrow the set.
	alive := out.alive[:0]
	for _, m := range out.set {
		if w := WorkerID(m & idMask); int(w) < len(names) && names[w] != "" {
			alive = append(alive, w)
			out.tiers[w] = TierCounts{}
			out.tiers[w][bestTier(m>>tierShift)]++
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
			n, cpu, disk := x.matchRun(hashes[i:win], lines[i-base:win-base], alive[0])
			tc := &out.tiers[alive[0]]
			tc[TierGPU] += int32(n - cpu - disk)
			tc[TierCPU] += int32(cpu)
			tc[TierDisk] += int32(disk)
			i += n
			if i >= win {
				i-- // the loop's i++ moves to the next window
				continue
			}
		}
		k := slotKey(hashes[i])
		s := x.shardOf(k)
		s1 := s.seq.Load()
		head, ok := lines[i-base].scan(k)
		fromLine := ok && s1&1 == 0 && s.seq.Load() == s1
		if !fromLine {
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
			a, b, c := lane(head, 0), lane(head, 1), lane(head, 2)
			for _, w := range alive {
				var m uint16
				if WorkerID(a&idMask) == w {
					m = a
				}
				if WorkerID(b&idMask) == w {
					m = b
				}
				if WorkerID(c&idMask) == w {
					m = c
				}
				if m != 0 {
					next = append(next, w)
					out.tiers[w][bestTier(m>>tierShift)]++
				} else {
					out.hit(names, w, i)
				}
			}
		default:
			if n <= 2*idsPerSlot && fromLine && x.pairAt(lines[i-base], k, s, s1, head, alive, &next, out, names, i) {
				break // four to six holders, read from the prefetched line
			}
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

// pairAt handles a block of four to six holders whose head (under key k, in
// shard s read at seq s1) came from the prefetched line l: the set's one
// continuation slot nearly always shares that line (see contKey), so both
// are read from it and the alive workers matched against six lanes, without
// readSet's second probe and copy. It appends the alive workers that hold
// the block to next and records a hit at i for the others. It returns false,
// having done nothing, when the continuation is not in the line or a writer
// intervened; the caller then takes the general path. (Measured on
// BenchmarkLookup10M/four-holders on the shared box: see the README.)
func (x *Index) pairAt(l *line, k uint64, s *shard, s1, head uint64, alive []WorkerID, next *[]WorkerID, out *Overlaps, names []string, i int) bool {
	ck := contKey(k, 1, x.topMask)
	cont, ok := l.scan(ck)
	if !ok {
		// The home line is full: the continuation is most likely in the
		// next one (one more miss, but no probe loop).
		t := s.tab.Load()
		i := (t.home(k) + slotsPerLine) & t.mask
		cont, ok = (*line)(t.slots[i : i+slotsPerLine]).scan(ck)
	}
	if !ok || cont == 0 || s.seq.Load() != s1 {
		return false
	}
	for _, w := range alive {
		m := memberIn(head, w) | memberIn(cont, w)
		if m != 0 {
			*next = append(*next, w)
			out.tiers[w][bestTier(m>>tierShift)]++
		} else {
			out.hit(names, w, i)
		}
	}
	return true
}

// memberIn returns the lane of slot value v (lanes 0–2) whose worker ID is
// w, or 0.
func memberIn(v uint64, w WorkerID) uint16 {
	var m uint16
	for li := range idsPerSlot {
		if x := lane(v, li); WorkerID(x&idMask) == w {
			m = x
		}
	}
	return m
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
			m := uint16(0)
			for _, x := range out.set {
				if WorkerID(x&idMask) == w {
					m = x
					break
				}
			}
			if m != 0 {
				next = append(next, w)
				out.tiers[w][bestTier(m>>tierShift)]++
			} else {
				out.hit(names, w, i)
			}
		}
		return next
	}
	// A mark is the stamp in its low 29 bits and the member's tier mask in
	// the top 3.
	const stampMask = 1<<29 - 1
	out.stamp++
	if out.stamp > stampMask {
		clear(out.mark)
		out.stamp = 1
	}
	for _, x := range out.set {
		if w := x & idMask; int(w) < len(out.mark) {
			out.mark[w] = out.stamp | uint32(x>>tierShift)<<29
		}
	}
	for _, w := range alive {
		if v := out.mark[w]; v&stampMask == out.stamp {
			next = append(next, w)
			out.tiers[w][bestTier(uint16(v>>29))]++
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
// consistently, and how many of those w holds at best in CPU memory and on
// disk. It stops at the first block that needs the general walk: not held by
// w, more holders, a writer active or a probe run leaving the line. A loop
// this small keeps its state in registers; the general walk spilled to the
// stack. Measured median one-holder lookup on the 10 M-block index (shared
// 2-core box): ~24 µs with the general walk, ~18 µs with matchRun calling
// line.scan, ~15 µs with the scan inlined.
func (x *Index) matchRun(hashes []uint64, lines []*line, w WorkerID) (n, cpu, disk int) {
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
			return j, cpu, disk
		}
		// Held iff the set has 1–3 members and the ID bits of one of lanes
		// 0–2 equal w: that lane's masked XOR is zero (a SWAR zero-lane
		// test; IDs fit in 13 bits, so a lane's bit 15 flags it). Borrows
		// can flag a lane above a zero one, never below, so the lowest
		// flag is w's lane.
		d := (v ^ ww) & (ones * idMask)
		z := (d - ones) &^ d & highs
		if n := v >> 48; n-1 >= idsPerSlot || z == 0 {
			return j, cpu, disk
		}
		// w's tier bits: GPU, CPU, disk from bit 13 of its lane up.
		m := v >> (uint(bits.TrailingZeros64(z)) - 15 + tierShift)
		g := m & 1
		c := m >> 1 & 1 &^ g
		cpu += int(c)
		disk += int(1 - g - c)
	}
	return len(hashes), cpu, disk
}
