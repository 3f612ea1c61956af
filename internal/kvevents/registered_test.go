package kvevents

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRegisteredOnlyIgnoresUnlistedWorkers: with RegisteredOnly, a worker
// the registry does not list (e.g. refused for another block size) never
// reaches the index; once listed, it syncs from a snapshot.
func TestRegisteredOnlyIgnoresUnlistedWorkers(t *testing.T) {
	srv := startNATS(t)
	idx := newMemIndex()
	c, err := NewConsumer(ConsumerConfig{NC: dial(t, srv.ClientURL()), Index: idx, SilenceAfter: 2 * time.Second,
		SnapshotTimeout: time.Second, RegisteredOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	goRun(t, c.Run)
	w := startWorker(t, dial(t, srv.ClientURL()), "w1", 50*time.Millisecond, 1)
	for i := 0; i < 3; i++ {
		w.eng.step(4)
	}
	eventually(t, 5*time.Second, "unlisted worker's batches ignored", func() bool { return c.Unregistered() >= 3 })
	if got := idx.sorted("w1"); len(got) != 0 {
		t.Fatalf("unlisted worker reached the index: %d blocks", len(got))
	}
	if _, known := c.HealthAll()["w1"]; known {
		t.Errorf("unlisted worker has health state: %+v", c.HealthAll()["w1"])
	}
	c.SetExpected("w1", true)
	inSync(t, c, idx, "w1", w.eng)
	w.eng.step(4)
	inSync(t, c, idx, "w1", w.eng)
}

// TestStaleEpochDoesNotKeepWorkerAlive: a dead run that keeps sending under
// an older epoch does not count as a sign of life for the live worker.
func TestStaleEpochDoesNotKeepWorkerAlive(t *testing.T) {
	srv := startNATS(t)
	idx := newMemIndex()
	// No heartbeats: the new run's one batch is its last sign of life, and
	// SilenceAfter must outlast the wait for inSync to see it healthy (at
	// 500 ms it did not always on a loaded host), so that the stale batches
	// below reach a worker that is still healthy.
	c, _ := startConsumer(t, dial(t, srv.ClientURL()), idx, 2*time.Second)
	old := startWorker(t, dial(t, srv.ClientURL()), "w1", time.Hour, 1)
	nw := startWorker(t, dial(t, srv.ClientURL()), "w1", time.Hour, 2) // newer epoch
	nw.eng.step(2)
	inSync(t, c, idx, "w1", nw.eng)
	// Only the old run speaks from now on.
	deadline := time.Now().Add(10 * time.Second)
	for c.Health("w1") != StateSilent {
		if time.Now().After(deadline) {
			t.Fatalf("worker still %v after 10 s of only stale-epoch batches", c.Health("w1"))
		}
		old.eng.step(1)
		time.Sleep(50 * time.Millisecond)
	}
	if h := c.HealthAll()["w1"]; h.Stale == 0 || h.Epoch != nw.pub.Epoch() {
		t.Errorf("health = %+v; want stale batches counted and epoch %d kept", h, nw.pub.Epoch())
	}
}

// TestExpectEpochResyncs: the registry's newer epoch triggers a resync
// even before the new run has sent anything.
func TestExpectEpochResyncs(t *testing.T) {
	srv := startNATS(t)
	idx := newMemIndex()
	c, _ := startConsumer(t, dial(t, srv.ClientURL()), idx, 5*time.Second)
	w := startWorker(t, dial(t, srv.ClientURL()), "w1", 100*time.Millisecond, 1)
	w.eng.step(3)
	inSync(t, c, idx, "w1", w.eng)
	before := c.HealthAll()["w1"].Resyncs
	c.ExpectEpoch("w1", w.pub.Epoch()) // the same epoch: nothing to do
	if h := c.HealthAll()["w1"]; h.State != StateHealthy || h.Resyncs != before {
		t.Fatalf("same epoch triggered a resync: %+v", h)
	}
	c.ExpectEpoch("w1", w.pub.Epoch()+1)
	eventually(t, 5*time.Second, "resync after a newer registry epoch", func() bool { return c.HealthAll()["w1"].Resyncs > before })
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestWorseningIsAlwaysLogged: the per-worker log rate limit never hides a
// worker going silent right after it became healthy.
func TestWorseningIsAlwaysLogged(t *testing.T) {
	srv := startNATS(t)
	idx := newMemIndex()
	var logs syncBuf
	c, err := NewConsumer(ConsumerConfig{NC: dial(t, srv.ClientURL()), Index: idx, SilenceAfter: 300 * time.Millisecond,
		LogEvery: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	goRun(t, c.Run)
	w := startWorker(t, dial(t, srv.ClientURL()), "w1", 50*time.Millisecond, 1)
	w.eng.step(2)
	inSync(t, c, idx, "w1", w.eng)
	w.stop()
	eventually(t, 5*time.Second, "silent", func() bool { return c.Health("w1") == StateSilent })
	eventually(t, 2*time.Second, "silent logged", func() bool {
		return strings.Contains(logs.String(), "state=silent") && strings.Contains(logs.String(), "worker=w1")
	})
}
