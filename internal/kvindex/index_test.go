package kvindex

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// chain returns n synthetic block hashes of one prompt.
func chain(seed uint64, n int) []uint64 {
	out := make([]uint64, n)
	parent := Root("")
	for i := range out {
		parent = HashBlock(parent, []uint32{uint32(seed), uint32(seed >> 32), uint32(i)})
		out[i] = parent
	}
	return out
}

func hitsMap(o *Overlaps) map[string]int {
	m := make(map[string]int, len(o.Hits))
	for _, h := range o.Hits {
		m[h.Worker] = h.Blocks
	}
	return m
}

func TestOverlapsLeadingPrefix(t *testing.T) {
	c := chain(1, 8)
	tests := []struct {
		name  string
		setup func(x *Index)
		want  map[string]int
	}{
		{"empty index", func(x *Index) {}, map[string]int{}},
		{"full chain", func(x *Index) { x.Store("a", c) }, map[string]int{"a": 8}},
		{"prefix only", func(x *Index) { x.Store("a", c[:3]) }, map[string]int{"a": 3}},
		{"hole stops the count", func(x *Index) {
			x.Store("a", c[:2])
			x.Store("a", c[3:])
		}, map[string]int{"a": 2}},
		{"later blocks without the first count nothing", func(x *Index) { x.Store("a", c[1:]) }, map[string]int{}},
		{"several workers", func(x *Index) {
			x.Store("a", c[:5])
			x.Store("b", c)
			x.Store("c", c[:1])
			x.Store("d", c[2:])
		}, map[string]int{"a": 5, "b": 8, "c": 1}},
		{"removed block cuts the prefix", func(x *Index) {
			x.Store("a", c)
			x.Store("b", c)
			x.Remove("a", c[4:5])
		}, map[string]int{"a": 4, "b": 8}},
		{"clear keeps others", func(x *Index) {
			x.Store("a", c)
			x.Store("b", c[:6])
			x.Clear("a")
		}, map[string]int{"b": 6}},
		{"drop keeps others", func(x *Index) {
			x.Store("a", c)
			x.Store("b", c[:6])
			x.DropWorker("b")
		}, map[string]int{"a": 8}},
		{"store is idempotent", func(x *Index) {
			x.Store("a", c[:4])
			x.Store("a", c[:4])
			x.Remove("a", c[1:2])
		}, map[string]int{"a": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := New(Config{Shards: 4, InitialSlots: 8})
			tt.setup(x)
			var o Overlaps
			x.Overlaps(c, &o)
			got := hitsMap(&o)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("overlaps = %v, want %v", got, tt.want)
			}
			for i := 1; i < len(o.Hits); i++ {
				if o.Hits[i].Blocks < o.Hits[i-1].Blocks {
					t.Errorf("hits not ascending: %+v", o.Hits)
				}
			}
			for _, h := range o.Hits {
				if got := o.Blocks(h.ID); got != h.Blocks {
					t.Errorf("Blocks(%d) = %d, want %d", h.ID, got, h.Blocks)
				}
			}
		})
	}
}

func TestDropWorkerForgetsAndReusesNothingStale(t *testing.T) {
	x := New(Config{})
	c := chain(2, 4)
	x.Store("a", c)
	id, _ := x.ID("a")
	x.DropWorker("a")
	if _, ok := x.ID("a"); ok {
		t.Fatal("dropped worker still known")
	}
	if got := x.Name(id); got != "" {
		t.Errorf("Name(%d) = %q after drop, want empty", id, got)
	}
	if got := x.Entries(); got != 0 {
		t.Errorf("Entries = %d after drop, want 0", got)
	}
	x.Store("b", c[:2])
	var o Overlaps
	x.Overlaps(c, &o)
	if got := hitsMap(&o); fmt.Sprint(got) != "map[b:2]" {
		t.Errorf("overlaps = %v, want map[b:2]", got)
	}
	x.Clear("b")
	if _, ok := x.ID("b"); !ok {
		t.Error("Clear forgot the worker; it must stay known")
	}
	if got := x.Entries(); got != 0 {
		t.Errorf("Entries = %d after clear, want 0", got)
	}
}

// model is a brute-force reference index.
type model map[uint64]map[string]bool

func (m model) overlaps(hashes []uint64, workers []string) map[string]int {
	out := map[string]int{}
	for _, w := range workers {
		n := 0
		for _, h := range hashes {
			if !m[h][w] {
				break
			}
			n++
		}
		if n > 0 {
			out[w] = n
		}
	}
	return out
}

// TestAgainstModel applies random stores, removes, clears and drops with
// many holders per block (so sets spill into continuation slots) and small
// tables (so they grow and delete with backward shifts), and compares every
// lookup and the entry count with a brute-force model.
func TestAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	x := New(Config{Shards: 2, InitialSlots: 8})
	m := model{}
	workers := make([]string, 20)
	for i := range workers {
		workers[i] = fmt.Sprintf("w%02d", i)
	}
	chains := make([][]uint64, 6)
	for i := range chains {
		chains[i] = chain(uint64(100+i), 40)
	}
	chains[1] = append(append([]uint64{}, chains[0][:10]...), chains[1][10:]...) // shared prefix
	// Force hash 0 and a derived-key neighbourhood into use too.
	chains[2][5] = 0
	var o Overlaps
	for step := 0; step < 4000; step++ {
		w := workers[rng.IntN(len(workers))]
		c := chains[rng.IntN(len(chains))]
		lo := rng.IntN(len(c))
		hi := lo + 1 + rng.IntN(len(c)-lo)
		switch r := rng.IntN(100); {
		case r < 60:
			x.Store(w, c[lo:hi])
			for _, h := range c[lo:hi] {
				if m[h] == nil {
					m[h] = map[string]bool{}
				}
				m[h][w] = true
			}
		case r < 95:
			x.Remove(w, c[lo:hi])
			for _, h := range c[lo:hi] {
				delete(m[h], w)
			}
		case r < 98:
			x.Clear(w)
			for _, s := range m {
				delete(s, w)
			}
		default:
			x.DropWorker(w)
			for _, s := range m {
				delete(s, w)
			}
		}
		q := chains[rng.IntN(len(chains))]
		x.Overlaps(q, &o)
		got, want := hitsMap(&o), m.overlaps(q, workers)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("step %d: overlaps = %v, want %v", step, got, want)
		}
		entries, blocks := 0, 0
		for _, s := range m {
			entries += len(s)
			if len(s) > 0 {
				blocks++
			}
		}
		if got := x.Entries(); got != entries {
			t.Fatalf("step %d: Entries = %d, want %d", step, got, entries)
		}
		if step%200 == 0 {
			if got := x.Blocks(); got != blocks {
				t.Fatalf("step %d: Blocks = %d, want %d", step, got, blocks)
			}
		}
	}
}

func TestManyHoldersOneBlock(t *testing.T) {
	x := New(Config{Shards: 1, InitialSlots: 8})
	c := chain(3, 3)
	const n = 1000
	for i := 0; i < n; i++ {
		x.Store(fmt.Sprintf("w%04d", i), c)
	}
	for i := 0; i < n; i += 2 {
		x.Remove(fmt.Sprintf("w%04d", i), c[2:])
	}
	var o Overlaps
	x.Overlaps(c, &o)
	if len(o.Hits) != n {
		t.Fatalf("hits = %d, want %d", len(o.Hits), n)
	}
	for _, h := range o.Hits {
		var idx int
		fmt.Sscanf(h.Worker, "w%04d", &idx)
		want := 3
		if idx%2 == 0 {
			want = 2
		}
		if h.Blocks != want {
			t.Errorf("%s: blocks = %d, want %d", h.Worker, h.Blocks, want)
		}
	}
	if got, want := x.Entries(), 3*n-n/2; got != want {
		t.Errorf("Entries = %d, want %d", got, want)
	}
}

func TestOverlapsAllocationFree(t *testing.T) {
	x := New(Config{})
	c := chain(4, 512)
	for i := 0; i < 50; i++ {
		x.Store(fmt.Sprintf("w%d", i), c[:10*i+1])
	}
	for i := 0; i < 5; i++ { // a block with more than three holders
		x.Store(fmt.Sprintf("x%d", i), c)
	}
	var o Overlaps
	x.Overlaps(c, &o)
	if len(o.Hits) != 55 || o.Max() != 512 {
		t.Fatalf("warm-up lookup: %d hits, max %d; want 55, 512", len(o.Hits), o.Max())
	}
	if allocs := testing.AllocsPerRun(100, func() { x.Overlaps(c, &o) }); allocs != 0 {
		t.Errorf("Overlaps allocates %v times per call, want 0", allocs)
	}
}

// TestConcurrentApplyAndLookup runs writers and readers together (meant for
// -race). Worker "stable" holds the full chain throughout, so every lookup
// must report it at full length, whatever the churn around it.
func TestConcurrentApplyAndLookup(t *testing.T) {
	x := New(Config{Shards: 4, InitialSlots: 8})
	c := chain(5, 64)
	x.Store("stable", c)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			name := fmt.Sprintf("churn%d", w)
			for i := 0; !stop.Load(); i++ {
				lo := rng.IntN(len(c))
				x.Store(name, c[lo:])
				x.Store(name, chain(uint64(i), 8)) // grows tables
				x.Remove(name, c[lo:])
				if i%50 == 0 {
					x.Clear(name)
				}
				if i%200 == 0 {
					x.DropWorker(name)
				}
			}
		}()
	}
	var bad atomic.Int64
	var readers sync.WaitGroup
	for r := 0; r < 2; r++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			var o Overlaps
			for i := 0; i < 3000; i++ {
				x.Overlaps(c, &o)
				id, _ := x.ID("stable")
				if o.Blocks(id) != len(c) {
					bad.Add(1)
				}
			}
		}()
	}
	readers.Wait()
	stop.Store(true)
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Errorf("%d lookups lost the stable worker's chain", n)
	}
}

func TestWorkerBlocks(t *testing.T) {
	x := New(Config{})
	x.Store("a", []uint64{1, 2, 3})
	x.Store("a", []uint64{3, 4}) // 3 again: not counted twice
	x.Store("b", []uint64{1})
	if got := x.WorkerBlocks("a"); got != 4 {
		t.Errorf("a holds %d, want 4", got)
	}
	x.Remove("a", []uint64{1, 9})
	if got := x.WorkerBlocks("a"); got != 3 {
		t.Errorf("after remove: a holds %d, want 3", got)
	}
	x.Clear("a")
	if got, b := x.WorkerBlocks("a"), x.WorkerBlocks("b"); got != 0 || b != 1 {
		t.Errorf("after clear: a %d b %d, want 0 and 1", got, b)
	}
	x.DropWorker("b")
	x.Store("c", []uint64{7}) // may reuse b's ID
	if got := x.WorkerBlocks("c"); got != 1 {
		t.Errorf("new worker c holds %d, want 1", got)
	}
	if got := x.WorkerBlocks("nobody"); got != 0 {
		t.Errorf("unknown worker holds %d", got)
	}
}
