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
// one probe. While one to six workers match, the walk skips the blocks all
// of them hold in a tight loop (matchRun) that reads each block's set from
// its prefetched home line; blocks where the set changes, and sets of more
// than six, take the general path. Lock-free and allocation-free with a warm out; it may run
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
	var cpu, disk [runMax]int32
	win, base := 1, 1 // blocks [base, win) have their home lines in lines
	for i := 1; i < len(hashes) && len(alive) > 0; i++ {
		if i >= win {
			// Prefetch the next window, doubling it each time (8, 16, …,
			// 128) so a prompt that stops matching early wastes little.
			end := min(len(hashes), i+min(max(8, 2*(win-1)), prefetchWindow))
			x.prefetch(hashes[i:end], lines)
			win, base = end, i
		}
		if len(alive) <= runMax {
			// The common case, a few workers matching: skip the blocks all
			// of them hold in a tight loop; stop at the first that needs a
			// closer look.
			stop := win
			if len(alive) == 1 {
				// The commonest, one worker: matchOne's leaner loop, and
				// matchRun for the one block it stops at (a set with a
				// continuation, a head past its home line) before it
				// takes over again.
				n, c, d := x.matchOne(hashes[i:win], lines[i-base:win-base], alive[0])
				tc := &out.tiers[alive[0]]
				tc[TierGPU] += int32(n) - c - d
				tc[TierCPU] += c
				tc[TierDisk] += d
				i += n
				stop = min(i+1, win)
			}
			if i < stop {
				n := x.matchRun(hashes[i:stop], lines[i-base:stop-base], alive, &cpu, &disk)
				for a, w := range alive {
					tc := &out.tiers[w]
					tc[TierGPU] += int32(n) - cpu[a] - disk[a]
					tc[TierCPU] += cpu[a]
					tc[TierDisk] += disk[a]
				}
				i += n
			}
			if i >= stop {
				i-- // the loop's i++ moves on: to matchOne again, or to the next window
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
// misses outstanding.
// Measured with perf on the 10 M-block index (shared 2-core box): the single
// pass spent ~13 µs of a 24 µs median lookup stalled on its loads; two
// passes took the median to 18–22 µs.
//
// A block's continuation slots share its home line (see contKey), so one
// load per block covers sets of any common size. The next lines are not
// loaded: loading them too for lookups with several matching workers
// measured no faster (four-holder medians of four alternating runs of 7 on
// the shared box, load average 8–9: 10.0–13.4 µs without, 10.4–13.6 µs
// with), and nor are they recorded: the few blocks read past their home
// line find it from the shard's table (probeOn), not from a second array
// filled for every block. The lines stay valid even if a grow replaces a
// table meanwhile: a replaced table is never written again, and the walk
// validates every read with the shard's seq.
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

// runMax is the most matching workers matchRun follows: a set it reads
// fits a head and one continuation slot.
const runMax = 2 * idsPerSlot

// matchRun returns how many leading blocks of hashes all the workers of
// alive (one to runMax of them) hold, in sets of at most runMax holders
// read consistently, and fills cpu and disk with how many of those blocks
// each alive[a] holds at best in CPU memory and on disk. lines holds each
// block's home line (see prefetch). It
// stops at the first block that needs the general walk: one an alive worker
// lacks, a larger set, a writer active, or a line from a table replaced
// since the prefetch that the block's probe run leaves.
//
// A block whose head and continuation values equal the previous block's
// has the same members in the same tiers, so it costs two compares: along a
// chain the holder set rarely changes. The per-worker test (members) and the
// tier counting (addTiers) run only when the set changes or a worker holds
// it below GPU memory; inlined in the loop they made it spill to the stack
// and took the one-holder median from ~8 to 9–15 µs. Measured medians on
// the 10 M-block index (shared 2-core box): one holder ~24 µs through the
// general walk, ~15 µs with the first one-worker run; four holders 25–36 µs
// through the general walk, 10–13 µs with this run (see the README).
func (x *Index) matchRun(hashes []uint64, lines []*line, alive []WorkerID, cpu, disk *[runMax]int32) int {
	*cpu, *disk = [runMax]int32{}, [runMax]int32{}
	lines = lines[:len(hashes)]
	var prevH, prevC uint64 // the last block's head and continuation values
	var cm, dm uint32       // bit a: alive[a] holds that block at best in CPU memory, on disk
	for j, h := range hashes {
		k := slotKey(h)
		s := x.shardOf(k)
		s1 := s.seq.Load()
		// line.scan, inlined by hand (it is over the compiler's budget):
		// the call cost ~5 ns a block with its spills. The line is loaded
		// once for the head and the continuation; pick and full inline.
		l := lines[j]
		k0, k1, k2, k3 := l[0].loadKey(), l[1].loadKey(), l[2].loadKey(), l[3].loadKey()
		v0, v1, v2, v3 := l[0].loadVal(), l[1].loadVal(), l[2].loadVal(), l[3].loadVal()
		// hv == 0 when k is not in the line: no head value is 0 (lane 3
		// holds the set size), so no separate hit flag is needed. Whether
		// the line is full is only asked then: as a branch in the common
		// path it mispredicted on every other block.
		hv := pick(k, k0, k1, k2, k3, v0, v1, v2, v3)
		if hv == 0 && full(k0, k1, k2, k3) {
			hv = x.probeOn(s, l, k)
		}
		n := hv >> 48
		if n-1 >= runMax { // absent (n = 0), a continuation or a larger set
			return j
		}
		cv := uint64(0)
		if n > idsPerSlot {
			// The continuation shares the head's home line (see contKey).
			ck := contKey(k, 1, x.topMask)
			cv = pick(ck, k0, k1, k2, k3, v0, v1, v2, v3)
			if cv == 0 && full(k0, k1, k2, k3) {
				cv = x.probeOn(s, l, ck)
			}
			if cv == 0 {
				return j
			}
		}
		if s1&1 != 0 || s.seq.Load() != s1 {
			return j
		}
		if hv != prevH || cv != prevC {
			var ok bool
			if cm, dm, ok = members(hv, cv, alive); !ok {
				return j
			}
			prevH, prevC = hv, cv
		}
		if cm|dm != 0 {
			addTiers(cpu, disk, cm, dm, len(alive))
		}
	}
	return len(hashes)
}

// matchOne is matchRun for one alive worker w and sets of one to three
// holders, the head slot alone: the walk of a prompt only one worker holds,
// the commonest lookup. It returns how many leading blocks of hashes w holds
// and how many of those it holds at best in CPU memory and on disk. It stops
// at the first block that needs more: one w lacks, a set with a
// continuation, a head past its full home line, a writer active.
//
// Why a second loop: matchRun's state for six workers and its probe past
// the home line (a call) keep more values live than there are registers, so
// it stores and reloads half a dozen of them every block; this loop has no
// call and about half the state. A block whose head value equals the
// previous block's costs one compare and one add (a one-holder chain's heads
// are all alike).
func (x *Index) matchOne(hashes []uint64, lines []*line, w WorkerID) (n int, cpu, disk int32) {
	const ones = 0x0000_0001_0001_0001 // lanes 0–2
	const highs = 0x0000_8000_8000_8000
	lines = lines[:len(hashes)]
	var prev uint64  // the last block's head value
	var inc uint64   // what a block with head value prev adds to tiers
	var tiers uint64 // blocks held at best in CPU memory (low 32 bits) and on disk (high 32)
	for j, h := range hashes {
		k := slotKey(h)
		s := x.shardOf(k)
		s1 := s.seq.Load()
		l := lines[j]
		k0, k1, k2, k3 := l[0].loadKey(), l[1].loadKey(), l[2].loadKey(), l[3].loadKey()
		v0, v1, v2, v3 := l[0].loadVal(), l[1].loadVal(), l[2].loadVal(), l[3].loadVal()
		hv := pick(k, k0, k1, k2, k3, v0, v1, v2, v3)
		// Lane 3 is the set size: 1–3 fit the head; absent (hv = 0), a
		// continuation's flag or a larger set do not.
		if hv>>48-1 >= idsPerSlot || s1&1 != 0 || s.seq.Load() != s1 {
			return j, int32(tiers), int32(tiers >> 32)
		}
		if hv != prev {
			// w's lane, by the SWAR zero-lane test of members.
			ww := uint64(w) * ones
			d := (hv ^ ww) & (ones * idMask)
			z := (d - ones) &^ d & highs
			if z == 0 {
				return j, int32(tiers), int32(tiers >> 32)
			}
			m := hv >> (uint(bits.TrailingZeros64(z)) - 15 + tierShift)
			g := m & 1
			c := m >> 1 & 1 &^ g
			inc = c | (1-g-c)<<32
			prev = hv
		}
		tiers += inc
	}
	return len(hashes), int32(tiers), int32(tiers >> 32)
}

// members reports whether every worker of alive is in the set of head value
// hv and continuation value cv (0 for none), and which of them hold the
// block at best in CPU memory (bit a of cm for alive[a]) and on disk (dm).
func members(hv, cv uint64, alive []WorkerID) (cm, dm uint32, ok bool) {
	const ones = 0x0000_0001_0001_0001 // lanes 0–2
	const highs = 0x0000_8000_8000_8000
	for a, w := range alive {
		// w is in a slot iff the ID bits of one of its lanes 0–2 equal w:
		// that lane's masked XOR is zero (a SWAR zero-lane test; IDs fit in
		// 13 bits, so a lane's bit 15 flags it). Borrows can flag a lane
		// above a zero one, never below, so the lowest flag is w's lane.
		// Empty lanes are 0, and no worker's ID is.
		ww := uint64(w) * ones
		d := (hv ^ ww) & (ones * idMask)
		zh := (d - ones) &^ d & highs
		d = (cv ^ ww) & (ones * idMask)
		zc := (d - ones) &^ d & highs
		// w's tier bits: GPU, CPU, disk from bit 13 of its lane up.
		var m uint64
		switch {
		case zh != 0:
			m = hv >> (uint(bits.TrailingZeros64(zh)) - 15 + tierShift)
		case zc != 0:
			m = cv >> (uint(bits.TrailingZeros64(zc)) - 15 + tierShift)
		default:
			return 0, 0, false
		}
		g := uint32(m) & 1
		c := uint32(m) >> 1 & 1 &^ g
		cm |= c << a
		dm |= (1 - g - c) << a
	}
	return cm, dm, true
}

// addTiers counts one more block for each of the first n alive workers
// whose bit is set in cm (in cpu) or dm (in disk).
func addTiers(cpu, disk *[runMax]int32, cm, dm uint32, n int) {
	for a := range n {
		cpu[a] += int32(cm >> a & 1)
		disk[a] += int32(dm >> a & 1)
	}
}

// probeOn returns the value of key k, whose full home line l did not hold
// it, by probing on from the line after l; 0 when absent or when l is not in
// the shard's current table (a grow replaced it since the prefetch), where a
// probe would mix two tables' states. The caller validates the read with
// s.seq.
func (x *Index) probeOn(s *shard, l *line, k uint64) uint64 {
	t := s.tab.Load()
	h := t.home(k)
	if (*line)(t.slots[h:h+slotsPerLine]) != l {
		return 0
	}
	if i := t.findFrom(k, (h+slotsPerLine)&t.mask); i >= 0 {
		return t.slots[i].loadVal()
	}
	return 0
}
