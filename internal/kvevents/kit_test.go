package kvevents

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/bus/bustest"
)

// memIndex is an in-memory IndexWriter: worker → set of hashes held in any
// tier, and worker → hash → tier mask.
type memIndex struct {
	mu      sync.Mutex
	blocks  map[string]map[uint64]struct{}
	tiers   map[string]map[uint64]uint8
	clears  int
	dropped []string
}

var _ IndexWriter = (*memIndex)(nil)

func newMemIndex() *memIndex {
	return &memIndex{blocks: make(map[string]map[uint64]struct{}), tiers: make(map[string]map[uint64]uint8)}
}

func (x *memIndex) StoreTier(w string, t Tier, hs []uint64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	m := x.blocks[w]
	if m == nil {
		m = make(map[uint64]struct{})
		x.blocks[w] = m
		x.tiers[w] = make(map[uint64]uint8)
	}
	for _, h := range hs {
		m[h] = struct{}{}
		x.tiers[w][h] |= 1 << t
	}
	return true
}

func (x *memIndex) RemoveTier(w string, t Tier, hs []uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, h := range hs {
		if x.tiers[w][h] &^= 1 << t; x.tiers[w][h] == 0 {
			delete(x.blocks[w], h)
			delete(x.tiers[w], h)
		}
	}
}

// tierOf returns worker w's tier mask for block h.
func (x *memIndex) tierOf(w string, h uint64) uint8 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.tiers[w][h]
}

func (x *memIndex) Clear(w string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.clears++
	clear(x.blocks[w])
	clear(x.tiers[w])
}

func (x *memIndex) DropWorker(w string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.blocks, w)
	delete(x.tiers, w)
	x.dropped = append(x.dropped, w)
}

func (x *memIndex) sorted(w string) []uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Sorted(maps.Keys(x.blocks[w]))
}

// fakeEngine holds a block set and publishes its changes under its lock,
// the way the simulated engine does.
type fakeEngine struct {
	mu     sync.Mutex
	blocks map[uint64]struct{}
	pub    *Publisher
	next   uint64
}

func newFakeEngine(pub *Publisher, seed uint64) *fakeEngine {
	return &fakeEngine{blocks: make(map[uint64]struct{}), pub: pub, next: seed << 32}
}

// step stores n new blocks and evicts every third stored so far.
func (e *fakeEngine) step(n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	stored := make([]uint64, n)
	for i := range stored {
		e.next++
		stored[i] = e.next*0x9e3779b97f4a7c15 | 1
		e.blocks[stored[i]] = struct{}{}
	}
	events := []Event{{Kind: Stored, Parent: 42, Hashes: stored}}
	var removed []uint64
	for h := range e.blocks {
		if h%3 == 0 {
			removed = append(removed, h)
		}
	}
	for _, h := range removed {
		delete(e.blocks, h)
	}
	if len(removed) > 0 {
		events = append(events, Event{Kind: Removed, Hashes: removed})
	}
	e.pub.PublishStep(events)
}

func (e *fakeEngine) snapshot(fn func([]uint64)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fn(slices.Collect(maps.Keys(e.blocks)))
}

func (e *fakeEngine) sorted() []uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Sorted(maps.Keys(e.blocks))
}

func startNATS(t testing.TB) *bus.Embedded {
	return bustest.Server(t, bus.EmbeddedConfig{DisableJetStream: true})
}

func dial(t testing.TB, url string) *nats.Conn { return bustest.Connect(t, url) }

// goRun runs fn(ctx) in a goroutine; the returned stop cancels and waits.
// Cleanup stops it too.
func goRun(t testing.TB, fn func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := fn(ctx); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// worker side: a publisher with heartbeats and snapshot service.
type testWorker struct {
	pub  *Publisher
	eng  *fakeEngine
	stop func()
}

func startWorker(t testing.TB, nc *nats.Conn, id string, heartbeat time.Duration, seed uint64) *testWorker {
	t.Helper()
	pub, err := NewPublisher(PublisherConfig{NC: nc, WorkerID: id, HeartbeatEvery: heartbeat})
	if err != nil {
		t.Fatal(err)
	}
	eng := newFakeEngine(pub, seed)
	stopHB := goRun(t, pub.Run)
	stopSnap := goRun(t, func(ctx context.Context) error { return pub.ServeSnapshots(ctx, eng.snapshot) })
	return &testWorker{pub: pub, eng: eng, stop: func() { stopHB(); stopSnap() }}
}

// startConsumer starts a consumer on nc and returns once the server has its
// subscription: Run subscribes in its own goroutine, so a batch published
// right after starting it could otherwise be missed (the worker then met
// mid-stream, through a snapshot, or not at all if it says nothing more).
func startConsumer(t testing.TB, nc *nats.Conn, idx IndexWriter, silence time.Duration) (*Consumer, func()) {
	t.Helper()
	c, err := NewConsumer(ConsumerConfig{NC: nc, Index: idx, SilenceAfter: silence, SnapshotTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stop := goRun(t, c.Run)
	eventually(t, 10*time.Second, "consumer subscribed", func() bool { return nc.NumSubscriptions() > 0 })
	// The server handles a connection's protocol in order: the flush's
	// PONG comes after the SUB is in place.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c, stop
}

func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not true after %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// inSync waits until the index holds exactly the engine's blocks and the
// worker is healthy.
func inSync(t testing.TB, c *Consumer, idx *memIndex, id string, eng *fakeEngine) {
	t.Helper()
	eventually(t, 10*time.Second, id+" healthy with the engine's blocks", func() bool {
		return c.Health(id) == StateHealthy && slices.Equal(idx.sorted(id), eng.sorted())
	})
}
