package bridge

import (
	"testing"

	"github.com/switchyard-llm/switchyard/internal/enginewire"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/vllmpub"
)

// noLoss fails unless the bridge took the engine's stream as it is: no
// rebuild, no restart, and the run's first batch where the engine put it.
func noLoss(t *testing.T, r *rig, firstSeq uint64) {
	t.Helper()
	s := r.br.Status()
	if s.Rebuilds != 0 || s.ReplaysShort != 0 || s.FirstSeq != firstSeq {
		t.Errorf("status = %+v, want no rebuild and first seq %d", s, firstSeq)
	}
}

// First contact is not loss: an engine numbering from 1 whose start-up
// replay returned nothing; its first live batch is its first.
func TestBridgeFirstSeqAfterEmptyReplay(t *testing.T) {
	r := newRig(t, vllmpub.Config{Quirks: vllmpub.Quirks{FirstSeq: 1}})
	r.startBridge(nil)
	a := newChain(20, 4, "")
	r.store(a, 0, 2)
	r.store(a, 2, 4)
	r.waitIndex(a.hashes)
	noLoss(t, r, 1)
}

// The bridge starts beside an engine numbering from 1 that has published:
// its replay buffer is not full, so it holds the engine's whole history.
func TestBridgeFirstSeqInReplay(t *testing.T) {
	r := newRig(t, vllmpub.Config{Quirks: vllmpub.Quirks{FirstSeq: 1}})
	a := newChain(21, 6, "")
	r.store(a, 0, 2)
	r.store(a, 2, 4)
	r.startBridge(nil)
	r.store(a, 4, 6)
	r.waitIndex(a.hashes)
	noLoss(t, r, 1)
}

// A full buffer that does not start at 0 may have evicted the engine's
// first batches: that is loss, whatever the engine's numbering.
func TestBridgeFullReplayBufferIsLoss(t *testing.T) {
	r := newRig(t, vllmpub.Config{BufferSteps: 2, Quirks: vllmpub.Quirks{FirstSeq: 1}})
	a, b := newChain(22, 2, ""), newChain(23, 2, "")
	r.store(a, 0, 1) // seq 1, evicted
	r.store(a, 1, 2)
	r.store(b, 0, 1)
	r.startBridge(func(c *Config) { c.ReplayBufferSteps = 2 })
	waitFor(t, "a rebuild", func() bool { return r.br.Status().Rebuilds == 1 })
	r.store(b, 1, 2)
	// Blocks seen since the clear: a[1] (an orphan now) and b.
	waitFor(t, "the blocks after the clear", func() bool { return r.br.Status().MirrorBlocks == 3 })
	if s := r.br.Status(); s.Mirror.Orphans != 1 || s.Rebuilds != 1 {
		t.Errorf("status = %+v, want one rebuild and a's second block kept as an orphan", s)
	}
}

// An engine numbering from 1 restarts: the new run's first batch is 1
// again, which is a restart and then first contact, not loss.
func TestBridgeRestartIntoRunFromOne(t *testing.T) {
	q := vllmpub.Quirks{FirstSeq: 1}
	r := newRig(t, vllmpub.Config{Quirks: q})
	r.startBridge(nil)
	a, b := newChain(24, 3, ""), newChain(25, 2, "")
	r.store(a, 0, 3)
	r.store(a, 0, 1) // seq 2: the old run got further than the new one will
	r.waitIndex(a.hashes)
	r.pub.Close()
	r.start.Add(60)
	r.startEngine(vllmpub.Config{Endpoint: r.ep, ReplayEndpoint: r.replay, BlockSize: 16, Quirks: q})
	r.store(b, 0, 1)
	r.store(b, 1, 2)
	r.waitIndex(b.hashes)
	if s := r.br.Status(); s.Restarts < 1 || s.Rebuilds != 0 || s.FirstSeq != 1 {
		t.Errorf("status = %+v, want the restart taken from seq 1 without a rebuild", s)
	}
}

// The third-party engine's whole wire at once: tagged arrays, root parents
// as 0, batches from 1, events held until 4 have accumulated.
func TestBridgeThirdPartyWire(t *testing.T) {
	r := newRig(t, vllmpub.Config{Layout: enginewire.Layout{ArrayEvents: true},
		Quirks: vllmpub.Quirks{ParentZero: true, FirstSeq: 1, BatchEvents: 4}})
	a, b := newChain(26, 8, ""), newChain(27, 4, "tenant-a")
	r.store(a, 0, 2) // held
	r.startBridge(nil)
	r.store(a, 2, 4)
	r.store(b, 0, 2)
	r.store(b, 2, 4) // the fourth event: batch 1 goes out
	r.waitIndex(a.hashes[:4], b.hashes)
	r.store(a, 4, 8)
	r.remove(b.hashes[3])
	r.remove(a.hashes[7])
	r.remove(a.hashes[6]) // batch 2
	r.waitIndex(a.hashes[:6], b.hashes[:3])
	noLoss(t, r, 1)
	if m := r.br.Status().Mirror; m.Orphans != 0 || m.UnknownRemoved != 0 {
		t.Errorf("mirror stats = %+v, want nothing dropped", m)
	}
}

// An adapter's chains go on the wire as vLLM sends them (lora_id,
// lora_name, the name in every block's extra_keys, the salt after it on
// the first) and come out rooted at the adapter, salt included.
func TestBridgeLoRAChains(t *testing.T) {
	r := newRig(t, vllmpub.Config{Layout: enginewire.Layout{ArrayEvents: true}})
	r.startBridge(nil)
	base := newChain(28, 3, "")
	sql := newChain(28, 3, kvindex.LoRASalt("sql-adapter", ""))
	salted := newChain(28, 3, kvindex.LoRASalt("sql-adapter", "tenant-a"))
	r.store(base, 0, 3)
	r.store(sql, 0, 2)
	r.store(sql, 2, 3)
	r.store(salted, 0, 3)
	r.waitIndex(base.hashes, sql.hashes, salted.hashes)
	if m := r.br.Status().Mirror; m.BadEvents != 0 || m.Orphans != 0 || m.StoredBlocks != 9 {
		t.Errorf("mirror stats = %+v", m)
	}
}
