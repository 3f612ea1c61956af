package bridge

import (
	"testing"

	"github.com/switchyard-llm/switchyard/internal/enginewire"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/vllmpub"
)

// The whole path: vLLM-wire frames over ZMQ → bridge → NATS → consumer →
// index, with the frontend's own hashes for the engine's tokens.
func TestBridgeEndToEnd(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  vllmpub.Config
	}{
		{"vllm 0.26", vllmpub.Config{}},
		{"legacy arrays and replay layout", vllmpub.Config{Layout: enginewire.Layout{ArrayEvents: true}, LegacyReplay: true}},
		{"map batch, bin hashes", vllmpub.Config{Layout: enginewire.Layout{MapBatch: true, BinHashes: true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, c.cfg)
			a, b := newChain(1, 8, ""), newChain(2, 4, "tenant-a")
			r.store(a, 0, 5) // published before the bridge: replay brings it
			r.startBridge(nil)
			r.store(a, 5, 8)
			r.store(b, 0, 4)
			r.waitIndex(a.hashes, b.hashes)
			r.remove(a.hashes[6:]...)
			r.waitIndex(a.hashes[:6], b.hashes)
			s := r.br.Status()
			if s.Load.Running != 3 || s.Load.Waiting != 2 || s.Load.TotalBlocks != 1000 || s.Load.UsedBlocks != 250 {
				t.Errorf("load from /metrics = %+v", s.Load)
			}
			if info := r.br.Info(); info.HTTPURL != r.engine.URL || info.Model != "Qwen/Qwen3-0.6B" || info.MaxModelLen != 40960 || info.KVBlocks != 1000 {
				t.Errorf("registry entry = %+v", info)
			}
			if s.Rebuilds != 0 || s.Malformed != 0 {
				t.Errorf("status = %+v, want no rebuild or malformed batch", s)
			}
		})
	}
}

func TestBridgeGapCoveredByReplay(t *testing.T) {
	r := newRig(t, vllmpub.Config{})
	r.startBridge(nil)
	a := newChain(3, 6, "")
	r.store(a, 0, 2)
	r.waitIndex(a.hashes[:2])
	r.pub.Skip(2) // two batches never reach the bridge
	r.store(a, 2, 3)
	r.store(a, 3, 4)
	r.store(a, 4, 6)
	r.waitIndex(a.hashes)
	if s := r.br.Status(); s.Gaps != 1 || s.ReplaysCovered < 1 || s.Rebuilds != 0 {
		t.Errorf("status = %+v, want one gap covered by replay", s)
	}
}

func TestBridgeGapBeyondReplayBuffer(t *testing.T) {
	r := newRig(t, vllmpub.Config{BufferSteps: 2})
	r.startBridge(nil)
	a, b := newChain(4, 4, ""), newChain(5, 2, "")
	r.store(a, 0, 2)
	r.waitIndex(a.hashes[:2])
	r.pub.Skip(3)
	r.store(a, 2, 3)
	r.store(a, 3, 4)
	r.store(b, 0, 1) // the buffer of 2 holds this and the next only
	r.store(b, 1, 2)
	// Cleared, then resyncing (approximate routing) for the hold, then the
	// blocks seen since the clear.
	waitFor(t, "a rebuild", func() bool { return r.br.Status().Rebuilds == 1 })
	waitFor(t, "the frontend to resync", func() bool { return r.cons.Health("vllm-0") == kvevents.StateResyncing })
	r.waitIndex(b.hashes)
	if s := r.br.Status(); s.ReplaysShort != 1 || s.Gaps != 1 {
		t.Errorf("status = %+v, want one short replay", s)
	}
}

func TestBridgeEngineRestart(t *testing.T) {
	r := newRig(t, vllmpub.Config{})
	r.startBridge(nil)
	a, b := newChain(6, 3, ""), newChain(7, 2, "")
	r.store(a, 0, 3)
	r.waitIndex(a.hashes)
	// The engine restarts: new process, new hash seed, sequence from 0;
	// two batches go out before the bridge's connection is back.
	r.pub.Close()
	r.start.Add(60)
	r.startEngine(vllmpub.Config{Endpoint: r.ep, ReplayEndpoint: r.replay, BlockSize: 16})
	r.pub.Skip(1)
	r.store(b, 0, 1)
	r.store(b, 1, 2)
	r.waitIndex(b.hashes)
	// The restart may be seen twice (sequence, then start time); each
	// clears and replays, so the result is the same.
	if s := r.br.Status(); s.Restarts < 1 || s.Rebuilds != 0 {
		t.Errorf("status = %+v, want the restart recovered without a rebuild", s)
	}
}

func TestBridgeRemovalsAndClear(t *testing.T) {
	r := newRig(t, vllmpub.Config{})
	r.startBridge(nil)
	a := newChain(8, 4, "")
	r.store(a, 0, 4)
	r.waitIndex(a.hashes)
	r.remove(12345, a.hashes[3]) // 12345 was never stored
	r.waitIndex(a.hashes[:3])
	if got := r.br.Status().Mirror.UnknownRemoved; got != 1 {
		t.Errorf("unknown removals = %d, want 1", got)
	}
	r.pub.PublishStep([]kvevents.Event{{Kind: kvevents.Cleared}})
	r.waitIndex()
	if s := r.br.Status(); s.MirrorBlocks != 0 || s.Mirror.Clears != 1 {
		t.Errorf("after AllBlocksCleared: %+v", s)
	}
}

func TestBridgeRestarted(t *testing.T) {
	r := newRig(t, vllmpub.Config{})
	b1 := r.startBridge(nil)
	a := newChain(9, 5, "")
	r.store(a, 0, 3)
	r.waitIndex(a.hashes[:3])
	b1.Close()       // deregisters; the frontend forgets nothing it is not told
	r.store(a, 3, 5) // published while no bridge runs
	r.startBridge(nil)
	r.waitIndex(a.hashes)
}
