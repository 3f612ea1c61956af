package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/perfmodel"
)

func span(start, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(start + i)
	}
	return out
}

// runOne adds req to c and advances until it finishes.
func runOne(t *testing.T, c *Core, req Request) Result {
	t.Helper()
	h, err := c.Add(req, c.Clock())
	if err != nil {
		t.Fatal(err)
	}
	for {
		dt, dels := c.Advance(c.Clock() + time.Hour)
		for _, d := range dels {
			if d.Done && d.H == h {
				return h.Result()
			}
		}
		if dt == 0 {
			t.Fatalf("core stalled before %s finished", req.ID)
		}
	}
}

// TestTierRoundTrip evicts a prefix from a tiny GPU cache into host memory,
// hits it from there, and checks the load took bytes over bandwidth in
// simulated time, with the events vLLM would send (testdata/offload.golden).
func TestTierRoundTrip(t *testing.T) {
	log := &eventLog{}
	// Blocks of 64 tokens keep the prefills compute-bound, so recomputing
	// costs more than loading (a small memory-bound prefill would recompute
	// for free, and the engine would rightly not load).
	c, err := NewCore(Config{KVBlocks: 8, BlockSize: 64, KVOffloadGiB: 1, Publisher: log}, false)
	if err != nil {
		t.Fatal(err)
	}
	a := span(100, 256) // 4 blocks
	if r := runOne(t, c, Request{ID: "a", Tokens: a, MaxTokens: 1}); r.CachedTokens != 0 {
		t.Fatalf("first run cached %d tokens", r.CachedTokens)
	}
	// 112 fresh tokens need 7 of the 8 blocks: three of a's four
	// are evicted, tail first, and offloaded.
	runOne(t, c, Request{ID: "b", Tokens: span(5000, 448), MaxTokens: 1})
	if l := c.Load(); l.TierBlocks[kvevents.TierCPU] != 3 || l.Offloaded[kvevents.TierCPU] != 3 {
		t.Fatalf("cpu tier holds %d blocks (%d offloaded), want 3", l.TierBlocks[kvevents.TierCPU], l.Offloaded[kvevents.TierCPU])
	}
	r := runOne(t, c, Request{ID: "a2", Tokens: append(a, span(900, 64)...), MaxTokens: 1})
	if want := [kvevents.NumTiers]int{64, 192, 0}; r.TierTokens != want || r.CachedTokens != 256 {
		t.Errorf("tier tokens %v (cached %d), want %v (256)", r.TierTokens, r.CachedTokens, want)
	}
	p := c.Profile()
	bytes := 192 * p.KVBytesPerToken
	wantLoad := time.Duration(float64(bytes) / 12.5e9 * float64(time.Second)) // RTX 4060: PCIe Gen4 x8
	if r.Load != wantLoad || r.Load != perfmodel.LoadTime(&p, perfmodel.TierCPU, 192) {
		t.Errorf("load took %v, want %d bytes / 12.5 GB/s = %v", r.Load, bytes, wantLoad)
	}
	// The load happens before the rest is computed: TTFT is the load plus
	// the prefill of the 64 uncached tokens after 256 cached.
	if want := wantLoad + c.PrefillTime(64, 256); r.TTFT != want {
		t.Errorf("ttft %v, want load + prefill = %v", r.TTFT, want)
	}
	// Recomputing would have been slower: the hit was worth loading.
	if re := c.PrefillTime(256, 64) - c.PrefillTime(64, 256); re <= wantLoad {
		t.Errorf("recompute %v not slower than load %v: bad test setup", re, wantLoad)
	}
	golden := filepath.Join("testdata", "offload.golden")
	var got strings.Builder
	for i, step := range log.all() {
		for _, e := range step {
			fmt.Fprintf(&got, "%d %s %s", i, e.Kind, e.Medium)
			if e.Kind == kvevents.Stored {
				fmt.Fprintf(&got, " parent=%x", e.Parent)
			}
			for _, h := range e.Hashes {
				fmt.Fprintf(&got, " %x", h)
			}
			got.WriteString("\n")
		}
	}
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with UPDATE_GOLDEN=1 to create it)", err)
	}
	if got.String() != string(want) {
		t.Errorf("events differ from %s:\ngot:\n%swant:\n%s", golden, got.String(), want)
	}
	// Applied to an index, the events leave a's chain as GPU 4 (loaded back,
	// the CPU copies kept) for the prompt a2 sent.
	x := kvindex.New(kvindex.Config{})
	for _, step := range log.all() {
		kvevents.Apply(x, "w", step)
	}
	var o kvindex.Overlaps
	x.Overlaps(kvindex.HashChain(nil, "", a, 64), &o)
	if len(o.Hits) != 1 || o.Hits[0].Tiers != (kvindex.TierCounts{4, 0, 0}) {
		t.Errorf("index after the round trip: %+v, want a's 4 blocks on GPU", o.Hits)
	}
}

// TestTierNotWorthLoading: on a link slow enough that loading loses to
// recomputing, the engine recomputes and the lower-tier copy is not used.
func TestTierNotWorthLoading(t *testing.T) {
	c, err := NewCore(Config{KVBlocks: 8, BlockSize: 64, KVOffloadGiB: 1}, false)
	if err != nil {
		t.Fatal(err)
	}
	c.profile.HostLinkBandwidth = 1e6 // 1 MB/s: ~7 s a block
	a := span(100, 256)
	runOne(t, c, Request{ID: "a", Tokens: a, MaxTokens: 1})
	runOne(t, c, Request{ID: "b", Tokens: span(5000, 448), MaxTokens: 1})
	r := runOne(t, c, Request{ID: "a2", Tokens: append(a, span(900, 64)...), MaxTokens: 1})
	if want := [kvevents.NumTiers]int{64, 0, 0}; r.TierTokens != want || r.Load != 0 {
		t.Errorf("tier tokens %v, load %v; want %v and no load", r.TierTokens, r.Load, want)
	}
}

// TestTierCascadeAndRefs fills host memory so blocks move on to disk, and
// checks a block being loaded is not evicted under the load.
func TestTierCascadeAndRefs(t *testing.T) {
	bb := float64(114688 * 16)
	c, err := NewCore(Config{KVBlocks: 8, KVOffloadGiB: 2 * bb / (1 << 30), KVDiskGiB: 4 * bb / (1 << 30)}, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		runOne(t, c, Request{ID: "r", Tokens: span(1000*(i+1), 96), MaxTokens: 1})
	}
	l := c.Load()
	if l.TierBlocks[kvevents.TierCPU] != 2 || l.TierBlocks[kvevents.TierDisk] != 4 {
		t.Errorf("cpu %d disk %d blocks, want full tiers 2 and 4", l.TierBlocks[kvevents.TierCPU], l.TierBlocks[kvevents.TierDisk])
	}
	if l.Offloaded[kvevents.TierDisk] == 0 {
		t.Errorf("nothing cascaded to disk")
	}
	// Pin one CPU entry as a load would; a full tier must then evict the
	// other and, once that is pinned too, drop new offloads.
	cpu := c.bm.lowerTier(kvevents.TierCPU)
	for h := range cpu.entries {
		cpu.ref(h)
	}
	before := len(cpu.entries)
	runOne(t, c, Request{ID: "r", Tokens: span(9000, 96), MaxTokens: 1})
	if len(cpu.entries) != before {
		t.Errorf("cpu entries %d, want the %d pinned kept", len(cpu.entries), before)
	}
	for _, e := range cpu.entries {
		if e.ref != 1 {
			t.Errorf("pinned entry lost its ref")
		}
	}
}

func TestOffloadConfigErrors(t *testing.T) {
	for _, cfg := range []Config{{KVOffloadGiB: -1}, {KVDiskGiB: 1}, {KVOffloadGiB: 1e-9}} {
		if _, err := NewCore(cfg, false); err == nil {
			t.Errorf("NewCore(%+v) accepted", cfg)
		}
	}
}

// TestTierLoadLandsBeforeGPU: a block loaded back from host memory is in
// GPU memory only once its load has finished, as vLLM caches blocks it
// receives from a KV connector when the transfer completes
// (delay_cache_blocks). So its GPU Stored event comes from a step that
// starts after the load, and a prompt admitted during the load cannot hit
// it on the GPU: it loads its own copy, queued behind the first on the
// host link.
func TestTierLoadLandsBeforeGPU(t *testing.T) {
	log := &eventLog{}
	c, err := NewCore(Config{KVBlocks: 10, BlockSize: 64, KVOffloadGiB: 1, Publisher: log}, false)
	if err != nil {
		t.Fatal(err)
	}
	a := span(100, 256) // 4 blocks
	runOne(t, c, Request{ID: "a", Tokens: a, MaxTokens: 1})
	// 576 fresh tokens need 9 of the 10 blocks: three of a's four go to
	// host memory.
	runOne(t, c, Request{ID: "b", Tokens: span(5000, 576), MaxTokens: 1})
	ah := kvindex.HashChain(nil, "", a, 64)
	cpu := c.bm.lowerTier(kvevents.TierCPU)
	for _, h := range ah[1:] {
		if _, ok := cpu.entries[h]; !ok {
			t.Fatalf("a's block %x is not in host memory: bad test setup", h)
		}
	}

	t0 := c.Clock()
	h2, err := c.Add(Request{ID: "a2", Tokens: append(slices.Clone(a), span(900, 64)...), MaxTokens: 1}, t0)
	if err != nil {
		t.Fatal(err)
	}
	h3, err := c.Add(Request{ID: "a3", Tokens: append(slices.Clone(a), span(1900, 64)...), MaxTokens: 1}, t0)
	if err != nil {
		t.Fatal(err)
	}
	p := c.Profile()
	load := perfmodel.LoadTime(&p, perfmodel.TierCPU, 192)
	// Step one at a time, noting when each published step started.
	var starts []time.Duration
	for done := 0; done < 2; {
		start, before := c.Clock(), len(log.all())
		dt, dels := c.Advance(start + 1)
		if dt == 0 {
			t.Fatal("core stalled")
		}
		for range log.all()[before:] {
			starts = append(starts, start)
		}
		for _, d := range dels {
			if d.Done {
				done++
			}
		}
	}
	for i, step := range log.all()[len(log.all())-len(starts):] {
		for _, e := range step {
			if e.Kind != kvevents.Stored || e.Medium != kvevents.TierGPU {
				continue
			}
			for _, h := range e.Hashes {
				if slices.Contains(ah[1:], h) && starts[i] < t0+load {
					t.Errorf("GPU Stored %x published by a step starting at %v, before the load lands at %v", h, starts[i], t0+load)
				}
			}
		}
	}
	r2, r3 := h2.Result(), h3.Result()
	want := [kvevents.NumTiers]int{64, 192, 0}
	if r2.TierTokens != want || r3.TierTokens != want {
		t.Errorf("tier tokens a2 %v a3 %v, want both %v (a3 cannot hit blocks still loading)", r2.TierTokens, r3.TierTokens, want)
	}
	if r2.TTFT < load {
		t.Errorf("a2 ttft %v, below its load %v", r2.TTFT, load)
	}
	if r3.TTFT < 2*load {
		t.Errorf("a3 ttft %v, below two loads %v queued on the host link", r3.TTFT, 2*load)
	}
}
