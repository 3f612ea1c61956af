package sim

import (
	"fmt"
	"os"
	"path/filepath"
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
