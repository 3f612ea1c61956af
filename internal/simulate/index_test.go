package simulate

import (
	"context"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/bench"
)

// TestIndexMirrorsCaches: after a run that fills and churns every worker's
// cache (the trace tiled with fresh hash ids onto small caches, with a host
// tier), the prefix index holds exactly what the workers cache, tier by
// tier: blocks the engines evicted or dropped leave the index, so it is
// bounded by the caches however long the run.
func TestIndexMirrorsCaches(t *testing.T) {
	reqs, err := bench.ReadTrace(mooncakePath, bench.FormatMooncake)
	if err != nil {
		t.Fatal(err)
	}
	c := smallConfig(t, 1)
	c.Items = bench.TraceItems(bench.TileTrace(reqs[:60], 2), 0.5)
	c.Workers = 4
	c.Engine.KVBlocks = 1500
	c.Engine.KVOffloadGiB = 2
	s := runSimulator(t, &c)
	for _, w := range s.workers {
		got := s.index.WorkerTierBlocks(w.id)
		l := w.core.Load()
		for tier := range got {
			if got[tier] != l.TierBlocks[tier] {
				t.Errorf("%s tier %d: the index holds %d blocks, the worker caches %d", w.id, tier, got[tier], l.TierBlocks[tier])
			}
		}
		if l.TierBlocks[0] < c.Engine.KVBlocks*9/10 {
			t.Errorf("%s caches %d of %d GPU blocks: the run did not fill its cache, so nothing was evicted", w.id, l.TierBlocks[0], c.Engine.KVBlocks)
		}
	}
}

// runSimulator validates c, runs it to the end and returns the simulator, for
// tests that inspect its state after the run.
func runSimulator(t *testing.T, c *Config) *simulator {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := newSimulator(*c)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}
