package bridge

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/switchyard-llm/switchyard/internal/bus"
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
	// The skipped batches make one gap. A busy machine can add another: a
	// SUB that joins late misses batch 0 too, and the idle replay poll then
	// recovers it (seen: Gaps 2, ReplaysCovered 2). What must hold is that
	// every gap was covered by replay, and nothing was rebuilt.
	if s := r.br.Status(); s.Gaps < 1 || s.ReplaysCovered < s.Gaps || s.ReplaysShort != 0 || s.ReplaysFailed != 0 || s.Rebuilds != 0 {
		t.Errorf("status = %+v, want every gap covered by replay", s)
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

// An engine that keeps serving but stopped publishing: the bridge's
// heartbeats keep its worker looking alive, yet the first request that
// should have stored blocks flags it within 3 s (consumer defaults).
func TestBridgeEngineStopsPublishing(t *testing.T) {
	r := newRig(t, vllmpub.Config{})
	r.startBridge(nil)
	a := newChain(10, 4, "")
	r.store(a, 0, 2)
	r.waitIndex(a.hashes[:2])
	r.pub.Pause(true)
	r.store(a, 2, 4) // computed, never published
	routed := time.Now()
	r.cons.ExpectEvents("vllm-0", routed) // the frontend, at the request's first token
	waitFor(t, "vllm-0 silent", func() bool { return r.cons.Health("vllm-0") == kvevents.StateSilent })
	d := time.Since(routed)
	t.Logf("flagged silent %v after routing", d)
	if d < kvevents.DefaultExpectWithin {
		t.Errorf("flagged after %v: before the %v allowed", d, kvevents.DefaultExpectWithin)
	}
	if d > 3*time.Second+500*time.Millisecond { // 3 s target, plus slack for a loaded box
		t.Errorf("flagged after %v, want within about 3 s", d)
	}
	// Publishing resumes: the lost batch is a gap replay cannot cover, so
	// the worker is rebuilt from what comes next.
	r.pub.Pause(false)
	b := newChain(11, 1, "")
	r.store(b, 0, 1)
	r.waitIndex(b.hashes)
	if s := r.br.Status(); s.Rebuilds != 1 {
		t.Errorf("status = %+v, want one rebuild", s)
	}
}

// Garbage on the engine's socket is counted, logged at a limited rate and
// survived; a batch that does not decode costs a rebuild, never a stale or
// poisoned index.
func TestBridgeMalformedFrames(t *testing.T) {
	r := newRig(t, vllmpub.Config{})
	raw := zmq4.NewPub(context.Background())
	t.Cleanup(func() { raw.Close() })
	ep := freeEndpoint(t)
	if err := raw.Listen(ep); err != nil {
		t.Fatal(err)
	}
	b := r.startBridge(func(c *Config) { c.KVEvents, c.KVReplay = ep, "" })
	a := newChain(12, 2, "")
	good := func(seq uint64, blocks int) [][]byte {
		e := enginewire.Event{Kind: enginewire.BlockStored, BlockSize: 16, TokenIDs: a.tokens[:blocks*16]}
		for i := range blocks {
			e.BlockHashes = append(e.BlockHashes, uint64(100+i))
		}
		return [][]byte{{}, enginewire.AppendSeq(nil, seq), enginewire.AppendBatch(nil, &enginewire.Batch{Events: []enginewire.Event{e}}, enginewire.Layout{})}
	}
	// The SUB may join late (ZMQ drops what a PUB sends before): resend
	// until the first good batch lands.
	waitFor(t, "the first batch", func() bool {
		_ = raw.Send(zmq4.NewMsgFrom(good(0, 1)...))
		return b.Status().Batches >= 1
	})
	before := b.Status().Rebuilds
	for _, f := range [][][]byte{
		{[]byte("only one frame")},
		{{}, {1, 2, 3}, {0x90}},                       // short sequence frame
		{{}, enginewire.AppendSeq(nil, 1), {0xc1, 0}}, // not msgpack: batch 1 is lost
	} {
		if err := raw.Send(zmq4.NewMsgFrom(f...)); err != nil {
			t.Fatal(err)
		}
	}
	if err := raw.Send(zmq4.NewMsgFrom(good(2, 2)...)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the batch after the garbage", func() bool { return b.Status().LastSeq == 2 })
	s := b.Status()
	if s.Malformed != 3 || s.Rebuilds != before+1 {
		t.Errorf("status = %+v, want 3 malformed and one rebuild for the lost batch", s)
	}
	resp, err := http.Get(b.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "switchyard_bridge_engine_malformed_total 3") {
		t.Errorf("bridge /metrics lacks the malformed count:\n%s", body)
	}
}

// The bridge's drop counters travel with its load report, so the frontend
// can tell a worker whose index is drifting from its engine.
func TestBridgeDriftInLoadReport(t *testing.T) {
	r := newRig(t, vllmpub.Config{})
	reports := make(chan bus.LoadReport, 64)
	sub, err := bus.SubscribeLoad(r.nc, r.subj, func(lr bus.LoadReport) {
		select {
		case reports <- lr:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	r.startBridge(nil)
	a, b := newChain(13, 4, ""), newChain(14, 3, "")
	r.store(a, 0, 2)
	r.store(b, 1, 3)     // its first block never published: an orphan
	r.remove(4242, 4343) // never stored: one event, counted as two blocks
	// The orphan's two blocks are indexed too, under a root of their own.
	waitFor(t, "the orphan and the unknown removals", func() bool {
		s := r.br.Status()
		return s.MirrorBlocks == 4 && s.Mirror.UnknownRemoved == 2
	})
	want := bus.Drift{Events: 4, OrphanParent: 1, RemovedUnknownBlock: 2}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case lr := <-reports:
			if lr.Drift == nil {
				t.Fatalf("load report %+v has no drift", lr)
			}
			if *lr.Drift == want {
				if got := lr.Drift.Dropped(); got != 3 {
					t.Errorf("dropped = %d, want 3", got)
				}
				return
			}
		case <-deadline:
			t.Fatalf("no load report with drift %+v; bridge status %+v", want, r.br.Status())
		}
	}
}

// vLLM keeps one lora_requests_info series per state it has been in; the
// latest (highest value) is the state now.
func TestParseMetricsLoRAInfo(t *testing.T) {
	text := `vllm:lora_requests_info{max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters=""} 1.7e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="b",waiting_lora_adapters="c"} 1.8e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1.75e+09
`
	_, labels := ParseMetrics(strings.NewReader(text))
	l := labels[loraInfoMetric]
	if got := adapterList(l["running_lora_adapters"]); len(got) != 1 || got[0] != "b" || l["waiting_lora_adapters"] != "c" {
		t.Errorf("latest state %v, want running [b] waiting c", l)
	}
	if got := adapterList(" a, ,b "); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("adapterList = %q", got)
	}
}

// An adapter the engine loads at run time reaches the registry, and leaves
// it when unloaded; the served names are read from the engine's /v1/models.
func TestBridgeRefreshesServedNames(t *testing.T) {
	r := newRig(t, vllmpub.Config{})
	withNames := func(extra string) {
		body := `{"object":"list","data":[{"id":"Qwen/Qwen3-0.6B","object":"model","max_model_len":40960,"root":"/models/qwen3","parent":null},` +
			`{"id":"qwen","object":"model","root":"/models/qwen3","parent":null}` + extra + `]}`
		r.models.Store(&body)
	}
	withNames("")
	b := r.startBridge(func(c *Config) { c.NamesEvery = 50 * time.Millisecond })
	if info := b.Info(); info.Model != "Qwen/Qwen3-0.6B" || len(info.Aliases) != 1 || info.Aliases[0] != "qwen" || len(info.Adapters) != 0 {
		t.Fatalf("registered %q aliases %q adapters %v", info.Model, info.Aliases, info.Adapters)
	}
	reg, err := bus.OpenRegistry(t.Context(), bus.RegistryConfig{NC: r.nc, Subjects: r.subj})
	if err != nil {
		t.Fatal(err)
	}
	w, err := reg.WatchWorkers(t.Context(), bus.WatchConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	adapters := func() []bus.Adapter { e, _ := w.Worker("vllm-0"); return e.Adapters }
	withNames(`,{"id":"sql-lora","object":"model","root":"/adapters/sql","parent":"Qwen/Qwen3-0.6B"}`)
	waitFor(t, "the loaded adapter in the registry", func() bool {
		a := adapters()
		return len(a) == 1 && a[0] == bus.Adapter{Name: "sql-lora", Root: "/adapters/sql"}
	})
	withNames("")
	waitFor(t, "the unloaded adapter gone from the registry", func() bool { return len(adapters()) == 0 })
}

// A drain outlasts a change of the engine's served names: the refresh
// that puts the new adapters in the registry keeps the entry draining.
func TestBridgeDrainSurvivesNamesRefresh(t *testing.T) {
	r := newRig(t, vllmpub.Config{})
	b := r.startBridge(func(c *Config) { c.NamesEvery = 50 * time.Millisecond })
	reg, err := bus.OpenRegistry(t.Context(), bus.RegistryConfig{NC: r.nc, Subjects: r.subj})
	if err != nil {
		t.Fatal(err)
	}
	w, err := reg.WatchWorkers(t.Context(), bus.WatchConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	// The fake engine always reports requests running: the drain waits
	// out its timeout.
	drained := make(chan bool, 1)
	go func() { drained <- b.Drain(t.Context(), 20*time.Second) }()
	entry := func() bus.WorkerInfo { e, _ := w.Worker("vllm-0"); return e }
	waitFor(t, "the entry draining", func() bool { return entry().Draining })
	body := `{"object":"list","data":[{"id":"Qwen/Qwen3-0.6B","object":"model","max_model_len":40960},` +
		`{"id":"sql-lora","object":"model","root":"/adapters/sql","parent":"Qwen/Qwen3-0.6B"}]}`
	r.models.Store(&body)
	waitFor(t, "the loaded adapter in the registry", func() bool { return len(entry().Adapters) == 1 })
	if e := entry(); !e.Draining {
		t.Errorf("entry after the names refresh = %+v, want still draining", e)
	}
	select {
	case idle := <-drained:
		t.Errorf("drain returned %v while the engine reports requests running", idle)
	default:
	}
}

// countHandler counts the log records whose message starts with prefix.
type countHandler struct {
	prefix string
	n      *atomic.Int64
}

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.n.Add(1)
	}
	return nil
}
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countHandler) WithGroup(string) slog.Handler      { return h }

// An engine that comes back serving another model is reported once, not
// at every refresh of its names, and the registry entry keeps the model
// the bridge registered.
func TestBridgeOtherModelWarnedOnce(t *testing.T) {
	r := newRig(t, vllmpub.Config{})
	var warned atomic.Int64
	other := `{"object":"list","data":[{"id":"meta-llama/Llama-3.1-8B","object":"model","max_model_len":8192}]}`
	b := r.startBridge(func(c *Config) {
		c.NamesEvery = 20 * time.Millisecond
		c.Logger = slog.New(countHandler{"the engine now serves another model", &warned})
	})
	r.models.Store(&other)
	waitFor(t, "the warning", func() bool { return warned.Load() > 0 })
	// Ten more refreshes, each a read of the engine's /v1/models.
	from := r.reads.Load()
	waitFor(t, "ten more refreshes", func() bool { return r.reads.Load() >= from+10 })
	if n := warned.Load(); n != 1 {
		t.Errorf("warned %d times over about ten refreshes, want once", n)
	}
	if m := b.Info().Model; m != "Qwen/Qwen3-0.6B" {
		t.Errorf("registered model %q, want the one the bridge started with", m)
	}
}
