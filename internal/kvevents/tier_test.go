package kvevents

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

// TestTiersFlow sends an offload sequence through NATS into the real index,
// then forces a resync and checks the tiered snapshot restores the same
// tiers.
func TestTiersFlow(t *testing.T) {
	srv := startNATS(t)
	idx := kvindex.New(kvindex.Config{})
	c, _ := startConsumer(t, dial(t, srv.ClientURL()), idx, 2*time.Second)
	pub, err := NewPublisher(PublisherConfig{NC: dial(t, srv.ClientURL()), WorkerID: "w1", HeartbeatEvery: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The worker's state, under mu as an engine's lock.
	var mu sync.Mutex
	state := map[Tier][]uint64{}
	goRun(t, pub.Run)
	goRun(t, func(ctx context.Context) error {
		return pub.ServeTieredSnapshots(ctx, func(fn func(Tier, []uint64)) {
			mu.Lock()
			defer mu.Unlock()
			for tier, hs := range state {
				fn(tier, hs)
			}
		})
	})
	chain := []uint64{101, 102, 103, 104}
	step := func(ev []Event, st map[Tier][]uint64) {
		mu.Lock()
		defer mu.Unlock()
		state = st
		pub.PublishStep(ev)
	}
	check := func(what string, unknown uint64) {
		t.Helper()
		var o kvindex.Overlaps
		eventually(t, 10*time.Second, what, func() bool {
			idx.Overlaps(chain, &o)
			h := c.HealthAll()["w1"]
			return c.Health("w1") == StateHealthy && len(o.Hits) == 1 && o.Hits[0].Blocks == 4 &&
				o.Hits[0].Tiers == kvindex.TierCounts{2, 1, 1} && h.UnknownMedia == unknown
		})
	}
	// The consumer takes its first snapshot when it first sees the worker.
	// Wait for that, so that the steps below reach it as events: a snapshot
	// taken after them would carry the unknown medium already mapped to the
	// disk tier, and the count this test checks would never move.
	eventually(t, 10*time.Second, "the worker healthy before any step", func() bool { return c.Health("w1") == StateHealthy })
	step([]Event{{Kind: Stored, Parent: 100, Hashes: chain[:3]}}, map[Tier][]uint64{TierGPU: chain[:3]})
	step([]Event{
		{Kind: Removed, Medium: TierGPU, Hashes: chain[2:3]},
		{Kind: Stored, Medium: TierCPU, Parent: 102, Hashes: chain[2:3]},
		// A medium this build does not know: indexed as the slowest tier.
		{Kind: Stored, Medium: Tier(7), Parent: 103, Hashes: chain[3:]},
	}, map[Tier][]uint64{TierGPU: chain[:2], TierCPU: chain[2:3], TierDisk: chain[3:]})
	check("GPU 2, CPU 1, disk 1 from events", 1)
	if h := c.HealthAll()["w1"]; h.TierBlocks != [3]uint64{4, 1, 1} {
		t.Errorf("tier blocks = %v, want [4 1 1] (3 stored + 1 removed on GPU)", h.TierBlocks)
	}
	before := c.HealthAll()["w1"].Resyncs
	pub.skip(1) // lose a batch: the consumer resyncs from the tiered snapshot
	step(nil, state)
	step([]Event{{Kind: Stored, Medium: TierGPU, Parent: 100, Hashes: chain[:1]}}, state)
	eventually(t, 10*time.Second, "a resync", func() bool { return c.HealthAll()["w1"].Resyncs > before })
	check("the same tiers from the snapshot", 1)
}
