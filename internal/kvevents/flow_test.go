package kvevents

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-llm/switchyard/internal/bus"
)

func TestFlowAppliesToIndex(t *testing.T) {
	srv := startNATS(t)
	idx := newMemIndex()
	c, _ := startConsumer(t, dial(t, srv.ClientURL()), idx, 2*time.Second)
	w := startWorker(t, dial(t, srv.ClientURL()), "w1", 100*time.Millisecond, 1)
	// Subscription readiness races the first publish: the consumer either
	// sees seq 1 or catches up from a snapshot. Either way it ends in sync.
	w.eng.step(8)
	inSync(t, c, idx, "w1", w.eng)
	before := c.HealthAll()["w1"]
	for i := 0; i < 50; i++ {
		w.eng.step(8)
	}
	inSync(t, c, idx, "w1", w.eng)
	h := c.HealthAll()["w1"]
	if h.Epoch != w.pub.Epoch() || h.LastSeq != w.pub.Seq() {
		t.Errorf("health = %+v, want epoch %d seq %d", h, w.pub.Epoch(), w.pub.Seq())
	}
	// The steady state applies batches directly, without resyncs.
	if h.Batches < before.Batches+50 || h.Blocks < before.Blocks+50*8 || h.Resyncs != before.Resyncs {
		t.Errorf("after 50 steps: %+v, before %+v; want ≥ 50 more batches, ≥ 400 more blocks, no resync", h, before)
	}
	if h.Gaps != 0 || h.Malformed != 0 {
		t.Errorf("health = %+v, want no gaps or malformed", h)
	}
}

func TestGapResyncs(t *testing.T) {
	srv := startNATS(t)
	idx := newMemIndex()
	c, _ := startConsumer(t, dial(t, srv.ClientURL()), idx, 2*time.Second)
	w := startWorker(t, dial(t, srv.ClientURL()), "w1", 100*time.Millisecond, 1)
	w.eng.step(4)
	inSync(t, c, idx, "w1", w.eng)
	before := c.HealthAll()["w1"]

	w.pub.skip(3) // three batches "lost"
	for i := 0; i < 20; i++ {
		w.eng.step(4)
	}
	inSync(t, c, idx, "w1", w.eng)
	h := c.HealthAll()["w1"]
	if h.Gaps <= before.Gaps || h.Resyncs <= before.Resyncs {
		t.Errorf("after a gap: gaps %d→%d, resyncs %d→%d; want both to grow", before.Gaps, h.Gaps, before.Resyncs, h.Resyncs)
	}
	if h.LastSeq != w.pub.Seq() {
		t.Errorf("last seq %d, want publisher's %d", h.LastSeq, w.pub.Seq())
	}
}

func TestEpochChangeResyncs(t *testing.T) {
	srv := startNATS(t)
	idx := newMemIndex()
	c, _ := startConsumer(t, dial(t, srv.ClientURL()), idx, 2*time.Second)
	oldConn := dial(t, srv.ClientURL())
	old := startWorker(t, oldConn, "w1", 100*time.Millisecond, 1)
	for i := 0; i < 5; i++ {
		old.eng.step(4)
	}
	inSync(t, c, idx, "w1", old.eng)
	old.stop()

	// The worker restarts: new epoch, different cache.
	nw := startWorker(t, dial(t, srv.ClientURL()), "w1", 100*time.Millisecond, 2)
	if nw.pub.Epoch() <= old.pub.Epoch() {
		t.Fatalf("new epoch %d not above old %d", nw.pub.Epoch(), old.pub.Epoch())
	}
	for i := 0; i < 5; i++ {
		nw.eng.step(4)
	}
	inSync(t, c, idx, "w1", nw.eng)
	h := c.HealthAll()["w1"]
	if h.Epoch != nw.pub.Epoch() || h.Resyncs == 0 {
		t.Errorf("health = %+v, want epoch %d and a resync", h, nw.pub.Epoch())
	}
	if !strings.Contains(h.Cause, "resynced") {
		t.Errorf("cause %q, want a resync", h.Cause)
	}

	// A late batch from the dead run is ignored, not applied.
	staleBefore := h.Stale
	old.eng.step(4)
	eventually(t, 5*time.Second, "stale batch counted", func() bool { return c.HealthAll()["w1"].Stale > staleBefore })
	if got := idx.sorted("w1"); !slices.Equal(got, nw.eng.sorted()) {
		t.Errorf("old epoch's batch changed the index")
	}
}

func TestSilenceDetected(t *testing.T) {
	const silence = 500 * time.Millisecond
	srv := startNATS(t)
	idx := newMemIndex()
	c, _ := startConsumer(t, dial(t, srv.ClientURL()), idx, silence)
	w := startWorker(t, dial(t, srv.ClientURL()), "w1", 100*time.Millisecond, 1)
	w.eng.step(4)
	inSync(t, c, idx, "w1", w.eng)

	// Heartbeats alone keep it healthy well past the threshold.
	time.Sleep(3 * silence) // observation window, not synchronisation
	if got := c.Health("w1"); got != StateHealthy {
		t.Fatalf("idle worker with heartbeats: state %v, want healthy (cause %q)", got, c.HealthAll()["w1"].Cause)
	}

	w.stop() // the worker stalls: no heartbeats, no snapshots
	stalled := time.Now()
	eventually(t, 10*time.Second, "w1 silent", func() bool { return c.Health("w1") == StateSilent })
	// Honest bound: last heartbeat ≤ 100 ms before the stall, threshold
	// 500 ms, check tick 50 ms; 3 s leaves room for a noisy machine.
	if d := time.Since(stalled); d > 3*time.Second {
		t.Errorf("silence detected after %v, want well under 3 s", d)
	}
	if h := c.HealthAll()["w1"]; !strings.Contains(h.Cause, "no events") || h.LastEventAge < silence {
		t.Errorf("silent health = %+v", h)
	}
	// Entries are kept while silent (the router discounts them).
	if len(idx.sorted("w1")) == 0 {
		t.Errorf("index entries dropped on silence")
	}

	// It comes back (same publisher, contiguous sequence): healthy again.
	w2stop := goRun(t, w.pub.Run)
	defer w2stop()
	eventually(t, 10*time.Second, "w1 healthy again", func() bool { return c.Health("w1") == StateHealthy })
}

func TestDisabledAndNeverHeard(t *testing.T) {
	const silence = 300 * time.Millisecond
	srv := startNATS(t)
	idx := newMemIndex()
	c, _ := startConsumer(t, dial(t, srv.ClientURL()), idx, silence)

	c.SetExpected("quiet", false)
	c.SetExpected("mute", true)
	if got := c.Health("quiet"); got != StateDisabled {
		t.Errorf("events-off worker: %v, want disabled", got)
	}
	if got := c.Health("mute"); got != StateResyncing {
		t.Errorf("registered, not yet heard: %v, want resyncing", got)
	}
	eventually(t, 5*time.Second, "mute silent", func() bool { return c.Health("mute") == StateSilent })
	time.Sleep(2 * silence) // observation window: disabled never turns silent
	if got := c.Health("quiet"); got != StateDisabled {
		t.Errorf("events-off worker after silence window: %v, want disabled", got)
	}
	if got := c.Health("nobody"); got != StateUnknown {
		t.Errorf("unknown worker: %v, want unknown", got)
	}

	// A disabled worker's events are ignored.
	w := startWorker(t, dial(t, srv.ClientURL()), "quiet", 50*time.Millisecond, 1)
	w.eng.step(4)
	eventually(t, 5*time.Second, "ignored batch counted", func() bool { return c.HealthAll()["quiet"].Stale > 0 })
	if got := idx.sorted("quiet"); len(got) != 0 {
		t.Errorf("disabled worker indexed %d blocks", len(got))
	}
	// Enabling it resyncs from a snapshot.
	c.SetExpected("quiet", true)
	inSync(t, c, idx, "quiet", w.eng)

	c.Forget("quiet")
	if got := c.Health("quiet"); got != StateUnknown && got != StateResyncing {
		t.Errorf("after Forget: %v", got)
	}
	idx.mu.Lock()
	dropped := slices.Contains(idx.dropped, "quiet")
	idx.mu.Unlock()
	if !dropped {
		t.Errorf("Forget did not drop the worker from the index")
	}
}

func TestMalformedCountedAndSurvived(t *testing.T) {
	srv := startNATS(t)
	idx := newMemIndex()
	c, _ := startConsumer(t, dial(t, srv.ClientURL()), idx, 2*time.Second)
	w := startWorker(t, dial(t, srv.ClientURL()), "w1", 100*time.Millisecond, 1)
	w.eng.step(4)
	inSync(t, c, idx, "w1", w.eng)

	raw := dial(t, srv.ClientURL())
	subj := bus.Subjects{}
	other := AppendBatch(nil, &Batch{WorkerID: "w2", Seq: 1})
	bad := [][2]string{
		{subj.KVEvents("w1"), "garbage"},
		{subj.KVEvents("w1"), string(other)}, // wrong worker on the subject
		{subj.KVEvents("ghost"), "\x97\x01"}, // truncated, unknown worker
		{subj.KVEvents("ghost"), ""},
	}
	for _, m := range bad {
		if err := raw.Publish(m[0], []byte(m[1])); err != nil {
			t.Fatal(err)
		}
	}
	raw.Flush()
	eventually(t, 5*time.Second, "4 malformed counted", func() bool { return c.Malformed() == 4 })
	if got := c.HealthAll()["w1"].Malformed; got != 2 {
		t.Errorf("w1 malformed = %d, want 2", got)
	}
	if got := c.Health("ghost"); got != StateUnknown {
		t.Errorf("garbage created worker ghost in state %v", got)
	}
	// Still applying.
	w.eng.step(4)
	inSync(t, c, idx, "w1", w.eng)
}

func TestMetrics(t *testing.T) {
	srv := startNATS(t)
	idx := newMemIndex()
	c, _ := startConsumer(t, dial(t, srv.ClientURL()), idx, 2*time.Second)
	reg := prometheus.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	c.SetExpected("off", false)
	w := startWorker(t, dial(t, srv.ClientURL()), "w1", 100*time.Millisecond, 1)
	// The consumer subscribes in Run, racing the worker's first publish. Let
	// it sync first (from seq 1 or a snapshot), so the step below reaches it
	// as an event: blocks_total counts blocks in applied events, not in
	// snapshots, and a step caught in the first snapshot would leave it at 0.
	inSync(t, c, idx, "w1", w.eng)
	w.eng.step(4)
	inSync(t, c, idx, "w1", w.eng)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			if m.Gauge != nil {
				got[key] = m.Gauge.GetValue()
			} else if m.Counter != nil {
				got[key] = m.Counter.GetValue()
			}
		}
	}
	want := map[string]float64{
		"switchyard_kv_event_health,state=healthy,worker=w1":   1,
		"switchyard_kv_event_health,state=silent,worker=w1":    0,
		"switchyard_kv_event_health,state=disabled,worker=off": 1,
		"switchyard_kv_event_health,state=healthy,worker=off":  0,
		"switchyard_kv_event_malformed_total":                  0,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if got["switchyard_kv_event_blocks_total,worker=w1"] < 4 {
		t.Errorf("blocks_total for w1 = %v, want ≥ 4", got["switchyard_kv_event_blocks_total,worker=w1"])
	}
}

// TestCluster publishes on one node of a 3-node NATS cluster and consumes
// (and resyncs) through another.
func TestCluster(t *testing.T) {
	var nodes []*bus.Embedded
	for i := 0; i < 3; i++ {
		cc := &bus.ClusterConfig{Name: "sy-kv"}
		if i > 0 {
			cc.Routes = []string{nodes[0].RouteURL()}
		}
		e, err := bus.StartEmbedded(bus.EmbeddedConfig{DisableJetStream: true, Cluster: cc})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		nodes = append(nodes, e)
	}
	eventually(t, 10*time.Second, "route mesh", func() bool {
		for _, n := range nodes {
			if n.NumRoutes() < 2 {
				return false
			}
		}
		return true
	})
	idx := newMemIndex()
	c, _ := startConsumer(t, dial(t, nodes[2].ClientURL()), idx, 2*time.Second)
	w := startWorker(t, dial(t, nodes[0].ClientURL()), "w1", 100*time.Millisecond, 1)
	// Keep stepping until the consumer's interest has crossed the routes
	// and it has caught up; then one more batch must arrive in order.
	eventually(t, 10*time.Second, "events crossing the cluster", func() bool {
		w.eng.step(2)
		time.Sleep(20 * time.Millisecond)
		return c.Health("w1") == StateHealthy && slices.Equal(idx.sorted("w1"), w.eng.sorted())
	})
	gaps := c.HealthAll()["w1"].Gaps
	for i := 0; i < 50; i++ {
		w.eng.step(4)
	}
	inSync(t, c, idx, "w1", w.eng)
	if g := c.HealthAll()["w1"].Gaps; g != gaps {
		t.Errorf("gaps grew from %d to %d once the cluster path was up", gaps, g)
	}
}

// TestRunStops checks Run returns once ctx ends and no handler runs after.
func TestRunStops(t *testing.T) {
	srv := startNATS(t)
	idx := newMemIndex()
	c, err := NewConsumer(ConsumerConfig{NC: dial(t, srv.ClientURL()), Index: idx})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// A worker whose heartbeats go on but whose events stopped (a real engine
// behind a bridge) is flagged silent by a request that should have stored
// blocks, not by its silence, and recovers with its next batch of events.
func TestExpectEventsFlagsStoppedStream(t *testing.T) {
	c, idx, w := expecting(t, time.Second)

	// Satisfied: events arrived after the request was routed.
	routed := time.Now()
	w.eng.step(2)
	inSync(t, c, idx, "w1", w.eng)
	c.ExpectEvents("w1", routed)
	time.Sleep(700 * time.Millisecond) // observation window, not synchronisation
	if got := c.Health("w1"); got != StateHealthy {
		t.Fatalf("events came after routing: state %v, want healthy", got)
	}

	// Owed: heartbeats only.
	routed = time.Now()
	c.ExpectEvents("w1", routed)
	eventually(t, 10*time.Second, "w1 silent", func() bool { return c.Health("w1") == StateSilent })
	if d := time.Since(routed); d < 400*time.Millisecond {
		t.Errorf("flagged after %v, before ExpectWithin", d)
	}
	if h := c.HealthAll()["w1"]; !strings.Contains(h.Cause, "should have stored blocks") {
		t.Errorf("cause = %q", h.Cause)
	}
	time.Sleep(300 * time.Millisecond) // heartbeats keep coming: still silent
	if got := c.Health("w1"); got != StateSilent {
		t.Fatalf("a heartbeat cleared the flag: state %v", got)
	}
	w.eng.step(1)
	eventually(t, 10*time.Second, "w1 healthy again", func() bool { return c.Health("w1") == StateHealthy })
}

// TestResyncMeetsEarlierExpectation is e2e TestNATSOutage's finding: a
// request routed during an outage armed an expectation whose events the
// outage lost; after the resync the worker was healthy with an exact index,
// then flagged silent by that expectation, and, serving only prompts it had
// cached, never published events to clear it. A snapshot asked for after
// an expectation was armed meets it; one armed after the resync still
// flags a stopped stream.
func TestResyncMeetsEarlierExpectation(t *testing.T) {
	c, _, w := expecting(t, 2*time.Second)
	resyncs := c.HealthAll()["w1"].Resyncs

	c.ExpectEvents("w1", time.Now()) // its events are then lost:
	w.pub.skip(1)                    // the next heartbeat shows the gap
	eventually(t, 10*time.Second, "a resync", func() bool { return c.HealthAll()["w1"].Resyncs > resyncs })
	time.Sleep(700 * time.Millisecond) // past the expectation's deadline; observation window, not synchronisation
	if h := c.HealthAll()["w1"]; h.State != StateHealthy {
		t.Errorf("after a resync that met the expectation: %v (%s), want healthy", h.State, h.Cause)
	}

	c.ExpectEvents("w1", time.Now())
	eventually(t, 10*time.Second, "w1 silent on an expectation armed after the resync", func() bool { return c.Health("w1") == StateSilent })
}

// expecting starts a consumer that judges expectations after 400 ms (grace
// 100 ms) and silence after silence, and worker w1 (heartbeats every
// 100 ms) with 4 blocks, in sync.
func expecting(t *testing.T, silence time.Duration) (*Consumer, *memIndex, *testWorker) {
	t.Helper()
	srv := startNATS(t)
	idx := newMemIndex()
	c, err := NewConsumer(ConsumerConfig{NC: dial(t, srv.ClientURL()), Index: idx, SilenceAfter: silence,
		ExpectWithin: 400 * time.Millisecond, ExpectGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	goRun(t, c.Run)
	w := startWorker(t, dial(t, srv.ClientURL()), "w1", 100*time.Millisecond, 1)
	w.eng.step(4)
	inSync(t, c, idx, "w1", w.eng)
	return c, idx, w
}
