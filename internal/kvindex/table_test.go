package kvindex

import (
	"fmt"
	"testing"
)

// TestContKey pins the properties lookups rely on: a continuation key is
// never its head's key, the continuations of one set are distinct, and all
// of them share the head's shard and home line.
func TestContKey(t *testing.T) {
	topMask := uint64(0x3f) << 58 // 64 shards
	tab := newTable(1 << 16)
	for i := 0; i < 2000; i++ {
		k := slotKey(Mix(uint64(i)))
		seen := map[uint64]int{k: 0}
		for s := 1; s < 64; s++ {
			c := contKey(k, s, topMask)
			if prev, dup := seen[c]; dup {
				t.Fatalf("contKey(%#x, %d) = %#x, same as slot %d", k, s, c, prev)
			}
			seen[c] = s
			if c&topMask != k&topMask {
				t.Errorf("contKey(%#x, %d) = %#x leaves the shard", k, s, c)
			}
			if tab.home(c) != tab.home(k) {
				t.Errorf("contKey(%#x, %d) = %#x: home %d, head's %d", k, s, c, tab.home(c), tab.home(k))
			}
		}
	}
}

// TestCrowdedLines stores blocks whose hashes all share one home line, so
// probe runs spill over many lines: lookups must fall back from the one-line
// scan to a full probe, and removals must shift the run back correctly.
func TestCrowdedLines(t *testing.T) {
	x := New(Config{Shards: 1, InitialSlots: 64})
	hashes := make([]uint64, 20)
	for i := range hashes {
		hashes[i] = uint64(i+1)<<40 | 0x10 // same low bits: same home in any table
	}
	x.Store("a", hashes)
	x.Store("b", hashes[:7])
	for i := 0; i < 4; i++ { // more than three holders on block 0
		x.Store(fmt.Sprintf("c%d", i), hashes[:1])
	}
	var o Overlaps
	x.Overlaps(hashes, &o)
	want := map[string]int{"a": 20, "b": 7, "c0": 1, "c1": 1, "c2": 1, "c3": 1}
	if got := hitsMap(&o); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("before removal: got %v, want %v", got, want)
	}
	x.Remove("a", hashes[3:4])
	x.Remove("b", hashes[:2])
	x.Overlaps(hashes, &o)
	want = map[string]int{"a": 3, "c0": 1, "c1": 1, "c2": 1, "c3": 1}
	if got := hitsMap(&o); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after removal: got %v, want %v", got, want)
	}
	if got, want := x.Entries(), 20-1+7-2+4; got != want {
		t.Errorf("entries = %d, want %d", got, want)
	}
}

// TestApplyAllocationFree pins that Store and Remove of a known worker
// allocate nothing once the table has room.
func TestApplyAllocationFree(t *testing.T) {
	x := New(Config{InitialSlots: 1 << 12})
	c := chain(9, 64)
	x.Store("w", c)
	allocs := testing.AllocsPerRun(100, func() {
		x.Remove("w", c)
		x.Store("w", c)
	})
	if allocs != 0 {
		t.Errorf("Store+Remove allocate %v times per call, want 0", allocs)
	}
}

// TestContinuationStaysInHomeLine fills a home line with one-holder heads
// and then gives one of them a fourth holder: its continuation must take a
// slot of the home line (a displaced head moves down the run), and every
// block must still report its holders, also after removals shift the run.
func TestContinuationStaysInHomeLine(t *testing.T) {
	x := New(Config{Shards: 1, InitialSlots: 64})
	hashes := make([]uint64, 6)
	for i := range hashes {
		hashes[i] = uint64(i+1)<<40 | 0x10 // one home line in any table
	}
	for i, h := range hashes {
		x.Store(fmt.Sprintf("a%d", i), []uint64{h})
	}
	k := slotKey(hashes[0])
	for _, w := range []string{"b", "c", "d"} { // four holders: a continuation
		x.Store(w, hashes[:1])
	}
	tab := x.shards[0].tab.Load()
	if _, ok := tab.lineOf(k).scan(contKey(k, 1, x.topMask)); !ok {
		t.Error("the continuation is not in its home line")
	}
	check := func(when string, want map[string]map[string]int) {
		t.Helper()
		var o Overlaps
		for i, h := range hashes {
			x.Overlaps([]uint64{h}, &o)
			if got := hitsMap(&o); fmt.Sprint(got) != fmt.Sprint(want[fmt.Sprint(i)]) {
				t.Errorf("%s: block %d: holders %v, want %v", when, i, got, want[fmt.Sprint(i)])
			}
		}
	}
	want := map[string]map[string]int{"0": {"a0": 1, "b": 1, "c": 1, "d": 1}}
	for i := 1; i < len(hashes); i++ {
		want[fmt.Sprint(i)] = map[string]int{fmt.Sprintf("a%d", i): 1}
	}
	check("after the fourth holder", want)
	x.Remove("a2", hashes[2:3])
	x.Remove("c", hashes[:1])
	want["2"] = map[string]int{}
	delete(want["0"], "c")
	check("after removals", want)
	if got, want := x.Entries(), 6-1+3-1; got != want {
		t.Errorf("entries = %d, want %d", got, want)
	}
}

// TestContinuationMovesNewestHead pins which head putCont moves out of a
// full home line: one that had already spilled there from an earlier line
// if there is one, and otherwise the line's last movable head (the newest
// stored), never the set's own head.
func TestContinuationMovesNewestHead(t *testing.T) {
	const lineA, lineB = 0x10, 0x14 // consecutive home lines in any table of 64 or more slots
	key := func(i int, home uint64) uint64 { return uint64(i+1)<<40 | home }
	inLine := func(x *Index, h uint64) bool {
		tab := x.shards[0].tab.Load()
		l := tab.lineOf(slotKey(h))
		for q := range l {
			if l[q].key == slotKey(h) {
				return true
			}
		}
		return false
	}

	// Line A holds four one-holder heads; a fourth holder for the first
	// needs a continuation there, so the newest head, the last, moves.
	x := New(Config{Shards: 1, InitialSlots: 64})
	for i := range 4 {
		x.Store(fmt.Sprintf("a%d", i), []uint64{key(i, lineA)})
	}
	for _, w := range []string{"b", "c", "d"} {
		x.Store(w, []uint64{key(0, lineA)})
	}
	for i, want := range []bool{true, true, true, false} {
		if got := inLine(x, key(i, lineA)); got != want {
			t.Errorf("newest: head %d in its home line = %v, want %v", i, got, want)
		}
	}

	// Line B holds b0, then a head spilled from the full line A, then b1
	// and b2; a continuation for b1 moves the spilled head, not b0 (the
	// first movable) or b2 (the last).
	x = New(Config{Shards: 1, InitialSlots: 64})
	x.Store("b0", []uint64{key(10, lineB)})
	for i := range 5 {
		x.Store(fmt.Sprintf("a%d", i), []uint64{key(i, lineA)})
	}
	for i := 1; i < 3; i++ {
		x.Store(fmt.Sprintf("b%d", i), []uint64{key(10+i, lineB)})
	}
	for _, w := range []string{"c", "d", "e"} {
		x.Store(w, []uint64{key(11, lineB)})
	}
	for i := range 3 {
		if !inLine(x, key(10+i, lineB)) {
			t.Errorf("spilled: line B's head %d left its home line", i)
		}
	}
	tab := x.shards[0].tab.Load()
	lb := (*line)(tab.slots[lineB : lineB+slotsPerLine])
	if _, ok := lb.scan(slotKey(key(4, lineA))); ok {
		t.Error("spilled: line A's spilled head is still in line B")
	}
	var o Overlaps
	for i := range 5 {
		x.Overlaps([]uint64{key(i, lineA)}, &o)
		if got, want := fmt.Sprint(hitsMap(&o)), fmt.Sprintf("map[a%d:1]", i); got != want {
			t.Errorf("spilled: block a%d: %s, want %s", i, got, want)
		}
	}
	x.Overlaps([]uint64{key(11, lineB)}, &o)
	if got, want := fmt.Sprint(hitsMap(&o)), "map[b1:1 c:1 d:1 e:1]"; got != want {
		t.Errorf("spilled: block b1: %s, want %s", got, want)
	}
}
