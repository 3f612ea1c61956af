package kvevents

import (
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/switchyard-llm/switchyard/internal/bus"
)

// countSnapshotRequests counts the snapshot requests sent to worker id.
func countSnapshotRequests(t *testing.T, nc *nats.Conn, id string) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	sub, err := nc.Subscribe(bus.Subjects{}.Snapshot(id), func(*nats.Msg) { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestPoisonedEpochIgnored replays the probe's poisoned batch: one batch
// with epoch 2^64-2 on a worker's subject made the consumer resync 17,609
// times in 20 s, and the worker stayed resyncing. An epoch from the future
// is no restart: it is counted and ignored, the worker stays in sync, and
// no snapshot is asked for.
func TestPoisonedEpochIgnored(t *testing.T) {
	srv := startNATS(t)
	idx := newMemIndex()
	c, _ := startConsumer(t, dial(t, srv.ClientURL()), idx, time.Second)
	w := startWorker(t, dial(t, srv.ClientURL()), "w1", 100*time.Millisecond, 1)
	w.eng.step(3)
	inSync(t, c, idx, "w1", w.eng)
	asked := countSnapshotRequests(t, dial(t, srv.ClientURL()), "w1")

	attacker := dial(t, srv.ClientURL())
	poison := Batch{WorkerID: "w1", Epoch: math.MaxUint64 - 1, Seq: 1, UnixNano: time.Now().UnixNano()}
	attacker.Publish(bus.Subjects{}.KVEvents("w1"), AppendBatch(nil, &poison))
	attacker.Flush()
	eventually(t, 5*time.Second, "the poisoned batch counted", func() bool {
		h, _ := c.HealthOf("w1")
		return h.Implausible == 1
	})
	// Observation window: a resync loop would show within it.
	time.Sleep(time.Second)
	w.eng.step(2)
	inSync(t, c, idx, "w1", w.eng)
	if n := asked.Load(); n != 0 {
		t.Errorf("%d snapshot requests after the poisoned batch, want 0", n)
	}
	if h, _ := c.HealthOf("w1"); h.Epoch != w.pub.Epoch() {
		t.Errorf("health after the poisoned batch = %+v, want in sync at the worker's epoch %d", h, w.pub.Epoch())
	}
}

// TestNewerEpochMustBeTheRegistrys: once the registry has told the
// consumer a worker's epoch, a batch of any other newer epoch, however
// plausible by the clock, is not a restart.
func TestNewerEpochMustBeTheRegistrys(t *testing.T) {
	srv := startNATS(t)
	idx := newMemIndex()
	c, _ := startConsumer(t, dial(t, srv.ClientURL()), idx, time.Second)
	w := startWorker(t, dial(t, srv.ClientURL()), "w1", 100*time.Millisecond, 1)
	w.eng.step(2)
	inSync(t, c, idx, "w1", w.eng)
	c.ExpectEpoch("w1", w.pub.Epoch())
	forged := Batch{WorkerID: "w1", Epoch: w.pub.Epoch() + 1, Seq: 1, UnixNano: time.Now().UnixNano()}
	a := dial(t, srv.ClientURL())
	a.Publish(bus.Subjects{}.KVEvents("w1"), AppendBatch(nil, &forged))
	a.Flush()
	eventually(t, 5*time.Second, "the forged epoch counted", func() bool {
		h, _ := c.HealthOf("w1")
		return h.Implausible == 1
	})
	if s := c.Health("w1"); s != StateHealthy {
		t.Errorf("state after a forged epoch = %v, want healthy", s)
	}
}

// TestResyncBacksOff: a worker whose snapshots never reconcile with its
// batches (here: its snapshot says seq 1, its batches are at seq 10) is
// resynced with a doubling wait, not in a loop, and /health says it keeps
// failing.
func TestResyncBacksOff(t *testing.T) {
	srv := startNATS(t)
	idx := newMemIndex()
	c, _ := startConsumer(t, dial(t, srv.ClientURL()), idx, 10*time.Second)
	liar := dial(t, srv.ClientURL())
	const epoch = 1_000
	var asked atomic.Int64
	sub, err := liar.Subscribe(bus.Subjects{}.Snapshot("w1"), func(m *nats.Msg) {
		asked.Add(1)
		m.Respond(AppendSnapshot(nil, &Snapshot{WorkerID: "w1", Epoch: epoch, Seq: 1}))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	liar.Flush()
	b := Batch{WorkerID: "w1", Epoch: epoch, Seq: 10, UnixNano: time.Now().UnixNano()}
	liar.Publish(bus.Subjects{}.KVEvents("w1"), AppendBatch(nil, &b))
	liar.Flush()
	eventually(t, 5*time.Second, "a first snapshot asked for", func() bool { return asked.Load() >= 1 })
	// Observation window: 3 s hold at most 7 attempts at 50 ms doubling
	// (0, 0.05, 0.15, 0.35, 0.75, 1.55, 3.15 s); the loop this replaces
	// made thousands.
	time.Sleep(3 * time.Second)
	if n := asked.Load(); n > 10 {
		t.Errorf("%d snapshot requests in 3 s, want at most 10 (backing off)", n)
	}
	h, _ := c.HealthOf("w1")
	if h.State != StateResyncing || h.ResyncFailures < 3 || !strings.Contains(h.Cause, "resync failing") {
		t.Errorf("health = state %v, %d resync failures, cause %q; want resyncing, at least 3 failures and a cause that says so", h.State, h.ResyncFailures, h.Cause)
	}
}

func TestResyncBackoff(t *testing.T) {
	for _, tc := range []struct {
		fails int
		want  time.Duration
	}{
		{0, 0}, {1, 50 * time.Millisecond}, {2, 100 * time.Millisecond}, {5, 800 * time.Millisecond},
		{10, 25600 * time.Millisecond}, {11, 30 * time.Second}, {1000, 30 * time.Second},
	} {
		if got := resyncBackoff(tc.fails); got != tc.want {
			t.Errorf("resyncBackoff(%d) = %v, want %v", tc.fails, got, tc.want)
		}
	}
}
