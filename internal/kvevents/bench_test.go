package kvevents

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

// The real index plugs straight into the consumer.
var _ IndexWriter = (*kvindex.Index)(nil)

// countIndex counts applied hashes and forwards to next (if any).
type countIndex struct {
	next   IndexWriter
	hashes atomic.Uint64
}

func (x *countIndex) StoreTier(w string, t Tier, hs []uint64) bool {
	x.hashes.Add(uint64(len(hs)))
	return x.next == nil || x.next.StoreTier(w, t, hs)
}

func (x *countIndex) RemoveTier(w string, t Tier, hs []uint64) {
	x.hashes.Add(uint64(len(hs)))
	if x.next != nil {
		x.next.RemoveTier(w, t, hs)
	}
}

func (x *countIndex) Clear(w string) {
	if x.next != nil {
		x.next.Clear(w)
	}
}

func (x *countIndex) DropWorker(w string) {
	if x.next != nil {
		x.next.DropWorker(w)
	}
}

// benchBatch fills b as batch seq of the benchmark stream: 32 new blocks
// stored and the 32 stored 8 batches earlier removed, 64 hashes in all, so
// the index stays at 256 live blocks per worker.
func benchBatch(b *Batch, stored, removed []uint64, seq uint64) {
	for i := range stored {
		stored[i] = (seq*32+uint64(i))*0x9e3779b97f4a7c15 | 1
	}
	b.Seq = seq
	b.Events = b.Events[:1]
	b.Events[0] = Event{Kind: Stored, Parent: 7, Hashes: stored}
	if seq > 8 {
		old := seq - 8
		for i := range removed {
			removed[i] = (old*32+uint64(i))*0x9e3779b97f4a7c15 | 1
		}
		b.Events = append(b.Events, Event{Kind: Removed, Hashes: removed})
	}
}

// TestApplyAllocs pins the consumer's steady-state path (decode + apply,
// without NATS) at zero allocations.
func TestApplyAllocs(t *testing.T) {
	c, err := NewConsumer(ConsumerConfig{NC: dial(t, startNATS(t).ClientURL()), Index: &countIndex{}})
	if err != nil {
		t.Fatal(err)
	}
	const runs = 200
	msgs := make([][]byte, runs+2)
	stored, removed := make([]uint64, 32), make([]uint64, 32)
	b := Batch{WorkerID: "w1", Epoch: 5, Events: make([]Event, 0, 2)}
	for i := range msgs {
		benchBatch(&b, stored, removed, uint64(i+1))
		msgs[i] = AppendBatch(nil, &b)
	}
	subject := bus.Subjects{}.KVEvents("w1")
	now := time.Now()
	c.handle(subject, msgs[0], now)
	i := 1
	allocs := testing.AllocsPerRun(runs, func() {
		c.handle(subject, msgs[i], now)
		i++
	})
	if allocs != 0 {
		t.Errorf("decode+apply: %v allocs per batch, want 0", allocs)
	}
	if h := c.HealthAll()["w1"]; h.State != StateHealthy || h.LastSeq != uint64(i) || h.Gaps != 0 {
		t.Errorf("after alloc run: %+v", h)
	}
}

// TestPublishStepAllocs pins PublishStep (encode + hand to NATS) at zero
// allocations.
func TestPublishStepAllocs(t *testing.T) {
	pub, err := NewPublisher(PublisherConfig{NC: dial(t, startNATS(t).ClientURL()), WorkerID: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	events := []Event{{Kind: Stored, Hashes: make([]uint64, 64)}}
	pub.PublishStep(events)
	allocs := testing.AllocsPerRun(200, func() { pub.PublishStep(events) })
	if allocs != 0 {
		t.Errorf("PublishStep: %v allocs, want 0", allocs)
	}
	if got := pub.Published(); got != 202 {
		t.Errorf("published %d, want 202", got)
	}
}

// BenchmarkEndToEnd measures publisher → embedded NATS → consumer → index,
// one batch (64 hashes) per iteration. Reports blocks/s applied.
func BenchmarkEndToEnd(b *testing.B) {
	b.Run("memindex", func(b *testing.B) { benchEndToEnd(b, newMemIndex()) })
	b.Run("kvindex", func(b *testing.B) { benchEndToEnd(b, kvindex.New(kvindex.Config{})) })
}

func benchEndToEnd(b *testing.B, inner IndexWriter) {
	srv := startNATS(b)
	idx := &countIndex{next: inner}
	c, _ := startConsumer(b, dial(b, srv.ClientURL()), idx, 10*time.Second)
	pub, err := NewPublisher(PublisherConfig{NC: dial(b, srv.ClientURL()), WorkerID: "w1", HeartbeatEvery: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	// The engine's lock: PublishStep and snapshots happen under it. The
	// live set is a pure function of the last seq (see benchBatch).
	var mu sync.Mutex
	stopSnap := goRun(b, func(ctx context.Context) error {
		return pub.ServeSnapshots(ctx, func(fn func([]uint64)) {
			mu.Lock()
			defer mu.Unlock()
			seq := pub.Seq()
			var live []uint64
			for s := max(int64(seq)-7, 1); s <= int64(seq); s++ {
				for i := uint64(0); i < 32; i++ {
					live = append(live, (uint64(s)*32+i)*0x9e3779b97f4a7c15|1)
				}
			}
			fn(live)
		})
	})
	defer stopSnap()
	stored, removed := make([]uint64, 32), make([]uint64, 32)
	batch := Batch{Events: make([]Event, 0, 2)}
	step := func() int {
		mu.Lock()
		defer mu.Unlock()
		benchBatch(&batch, stored, removed, pub.Seq()+1)
		pub.PublishStep(batch.Events)
		return 32 * len(batch.Events)
	}
	// The consumer subscribes asynchronously: step until it is in sync
	// (from seq 1 or from a snapshot) before timing.
	eventually(b, 10*time.Second, "consumer in sync", func() bool {
		if c.Health("w1") == StateHealthy {
			return true
		}
		step()
		time.Sleep(10 * time.Millisecond)
		return false
	})
	base := idx.hashes.Load()
	var sent uint64
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		sent += uint64(step())
		// Flow control: keep at most ~16k hashes in flight so the
		// subscription never overflows (which would be a gap, not speed).
		for i%64 == 0 && sent-(idx.hashes.Load()-base) > 16<<10 {
			runtime.Gosched()
		}
	}
	for idx.hashes.Load()-base < sent {
		runtime.Gosched()
	}
	el := time.Since(start)
	b.StopTimer()
	h := c.HealthAll()["w1"]
	if h.Gaps != 0 || h.Resyncs > 1 || h.State != StateHealthy || h.LastSeq != pub.Seq() {
		b.Fatalf("stream not applied cleanly: %+v (publisher seq %d)", h, pub.Seq())
	}
	if m, ok := inner.(*memIndex); ok {
		// The live set is the last 8 batches' 32 blocks each.
		if got := len(m.sorted("w1")); got != min(8, int(pub.Seq()))*32 {
			b.Fatalf("index holds %d blocks, want %d", got, min(8, int(pub.Seq()))*32)
		}
	}
	b.ReportMetric(float64(sent)/el.Seconds(), "blocks/s")
	b.ReportMetric(float64(b.N)/el.Seconds(), "batches/s")
}

// BenchmarkDecodeBatch decodes Switchyard's own batches of 32 stored and 32
// removed hashes: the existing codec, beside enginewire's
// BenchmarkDecodeBatch for vLLM's wire (which also carries 16 token ids a
// block).
func BenchmarkDecodeBatch(b *testing.B) {
	stored, removed := make([]uint64, 32), make([]uint64, 32)
	bt := Batch{WorkerID: "w1", Epoch: 1, Events: make([]Event, 2)}
	benchBatch(&bt, stored, removed, 9)
	data := AppendBatch(nil, &bt)
	var out Batch
	if err := DecodeBatch(data, &out); err != nil || len(out.Events) != 2 {
		b.Fatalf("decode: %v", err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := DecodeBatch(data, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "hashes/s")
}
