package replica

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/bus/bustest"
)

// fakeApplier records what a Sharer applies, as a router would see it.
type fakeApplier struct {
	mu       sync.Mutex
	inflight map[string]string // request → worker
	onWorker map[string]int    // "worker request" → prefill blocks, for requests in flight on two workers
	decoding map[string]bool
	finished map[string]bool
	dropped  map[string]bool
	approx   map[uint64]string
	links    []Link
	settings []Settings
	stored   map[string]string // response id → worker
}

func newFake() *fakeApplier {
	return &fakeApplier{inflight: map[string]string{}, onWorker: map[string]int{}, decoding: map[string]bool{}, finished: map[string]bool{},
		dropped: map[string]bool{}, approx: map[uint64]string{}, stored: map[string]string{}}
}

func (f *fakeApplier) Started(w, id string, prefill, _ int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inflight[id] = w
	f.onWorker[w+" "+id] = prefill
}
func (f *fakeApplier) FirstToken(_, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.decoding[id] = true
}
func (f *fakeApplier) Finished(w, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.inflight, id)
	delete(f.onWorker, w+" "+id)
	f.finished[id] = true
}
func (f *fakeApplier) Dropped(w, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.inflight, id)
	delete(f.onWorker, w+" "+id)
	f.dropped[id] = true
}
func (f *fakeApplier) RecordApprox(w string, hs []uint64, _ time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range hs {
		f.approx[h] = w
	}
}
func (f *fakeApplier) Link(l Link) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.links = append(f.links, l)
}
func (f *fakeApplier) StoredResponse(id, w string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stored[id] = w
}
func (f *fakeApplier) Settings(s Settings) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settings = append(f.settings, s)
}

func (f *fakeApplier) check(fn func(f *fakeApplier) bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fn(f)
}

type running struct {
	s      *Sharer
	f      *fakeApplier
	cancel context.CancelFunc
	done   chan struct{}
}

func startSharer(t *testing.T, nc *nats.Conn, id string, links []Link) *running {
	t.Helper()
	f := newFake()
	s, err := New(Config{NC: nc, Subjects: bus.Subjects{Namespace: "t"}, ID: id, Apply: f,
		Links: func() []Link { return links }, FullEvery: 100 * time.Millisecond, PeerTTL: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{s: s, f: f, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		if err := s.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *running) stop() {
	r.cancel()
	<-r.done
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after 5 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestShareInFlightApproxAndSettings(t *testing.T) {
	srv := bustest.Server(t, bus.EmbeddedConfig{Port: -1, StoreDir: t.TempDir()})
	a := startSharer(t, bustest.Connect(t, srv.ClientURL()), "fe-a", nil)
	b := startSharer(t, bustest.Connect(t, srv.ClientURL()), "fe-b", nil)
	waitFor(t, "peers see each other", func() bool { return len(a.s.Status().Peers) == 1 && len(b.s.Status().Peers) == 1 })

	a.s.Started("w1", "r1", 10, 12)
	a.s.Started("w2", "r2", 5, 5)
	waitFor(t, "b sees a's two requests", func() bool {
		return b.f.check(func(f *fakeApplier) bool { return f.inflight["fe-a/r1"] == "w1" && f.inflight["fe-a/r2"] == "w2" })
	})
	a.s.FirstToken("w1", "r1")
	a.s.Finished("w2", "r2")
	waitFor(t, "b sees r1 decoding and r2 finished", func() bool {
		return b.f.check(func(f *fakeApplier) bool { return f.decoding["fe-a/r1"] && f.finished["fe-a/r2"] })
	})

	a.s.Approx("w1", []uint64{1, 2, 3}, time.Now())
	waitFor(t, "b has a's approximate records", func() bool {
		return b.f.check(func(f *fakeApplier) bool { return f.approx[1] == "w1" && f.approx[3] == "w1" })
	})

	b.s.SetSettings("round-robin", "never")
	waitFor(t, "a applies b's settings", func() bool {
		return a.f.check(func(f *fakeApplier) bool { return len(f.settings) == 1 && f.settings[0].Policy == "round-robin" })
	})
	if got := b.f.check(func(f *fakeApplier) bool { return len(f.settings) == 0 }); !got {
		t.Error("b applied its own settings change back to itself")
	}
	if !a.s.Leader() || b.s.Leader() {
		t.Errorf("leader: a %v, b %v; want fe-a (the smaller id) only", a.s.Leader(), b.s.Leader())
	}
}

// TestLateReplicaConvergesAndDeadOneExpires: a replica that starts late
// gets the others' whole share at once; one that dies is dropped.
func TestLateReplicaConvergesAndDeadOneExpires(t *testing.T) {
	srv := bustest.Server(t, bus.EmbeddedConfig{Port: -1, StoreDir: t.TempDir()})
	link := Link{From: "p1", To: "d1", BytesPerSec: 1e9, RTTMillis: 0.5}
	a := startSharer(t, bustest.Connect(t, srv.ClientURL()), "fe-a", []Link{link})
	for i := range 3000 { // more than one full part
		a.s.Started("w1", "r"+strconv.Itoa(i), 1, 1)
	}
	a.s.Approx("w1", []uint64{7, 8}, time.Now())
	a.s.SetSettings("least-loaded", "auto")
	time.Sleep(50 * time.Millisecond) // let a publish before b exists: b must get it from its hello

	start := time.Now()
	b := startSharer(t, bustest.Connect(t, srv.ClientURL()), "fe-b", nil)
	waitFor(t, "late replica converges", func() bool {
		return b.f.check(func(f *fakeApplier) bool {
			return len(f.inflight) == 3000 && f.approx[8] == "w1" && len(f.links) == 1 && f.links[0].Sync &&
				len(f.settings) == 1 && f.settings[0].Policy == "least-loaded"
		})
	})
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("late replica took %v to converge, want within 2 s", d)
	} else {
		t.Logf("late replica converged in %v (3,000 requests in flight, approximate records, a link, settings)", d.Round(time.Millisecond))
	}

	// A finish lost on the wire is healed by the next full set.
	a.s.mu.Lock()
	delete(a.s.inflight, reqKey{"w1", "r0"})
	a.s.mu.Unlock()
	waitFor(t, "full set reconciles a lost finish", func() bool {
		return b.f.check(func(f *fakeApplier) bool { return f.finished["fe-a/r0"] })
	})

	a.stop()
	stopped := time.Now()
	waitFor(t, "dead replica's share expires", func() bool {
		return b.f.check(func(f *fakeApplier) bool { return len(f.inflight) == 0 && f.dropped["fe-a/r1"] })
	})
	t.Logf("dead replica's share dropped %v after it stopped (PeerTTL 400 ms here)", time.Since(stopped).Round(time.Millisecond))
	if n := len(b.s.Status().Peers); n != 0 {
		t.Errorf("peers after expiry = %d, want 0", n)
	}
}

func TestMalformedAndDuplicateIDCounted(t *testing.T) {
	srv := bustest.Server(t, bus.EmbeddedConfig{Port: -1, DisableJetStream: true})
	nc := bustest.Connect(t, srv.ClientURL())
	a := startSharer(t, nc, "fe-a", nil)
	waitFor(t, "a said hello", func() bool { return counter(a.s.m.messages.WithLabelValues("sent")) >= 1 })
	subj := bus.Subjects{Namespace: "t"}.Replicas()
	_ = nc.Publish(subj, []byte("{not json"))
	_ = nc.Publish(subj, []byte(`{"replica":"fe-a","epoch":1,"seq":1}`))
	_ = nc.Flush()
	waitFor(t, "both counted", func() bool {
		return counter(a.s.m.dropped.WithLabelValues("malformed")) == 1 && counter(a.s.m.dropped.WithLabelValues("duplicate_id")) == 1
	})
}

// TestServerAnswersAreNotFromFrontends: a message with headers on the
// frontends' subject is the server answering a request whose reply
// subject someone aimed here (a JetStream direct get of a worker's own
// registry value, say); its settings must not apply, however well formed.
func TestServerAnswersAreNotFromFrontends(t *testing.T) {
	srv := bustest.Server(t, bus.EmbeddedConfig{Port: -1, DisableJetStream: true})
	nc := bustest.Connect(t, srv.ClientURL())
	a := startSharer(t, nc, "fe-a", nil)
	waitFor(t, "a said hello", func() bool { return counter(a.s.m.messages.WithLabelValues("sent")) >= 1 })
	m := nats.NewMsg(bus.Subjects{Namespace: "t"}.Replicas())
	m.Header.Set("Nats-Stream", "KV_sy_t_workers")
	m.Data = []byte(`{"replica":"x","epoch":1,"seq":1,"settings":{"policy":"random","version":9223372036854775807,"by":"zzzz"}}`)
	_ = nc.PublishMsg(m)
	_ = nc.Flush()
	waitFor(t, "dropped as foreign", func() bool { return counter(a.s.m.dropped.WithLabelValues("foreign")) == 1 })
	if a.f.check(func(f *fakeApplier) bool { return len(f.settings) > 0 }) {
		t.Errorf("settings from a server answer were applied")
	}
}

// TestSettingsCannotBePinned: settings are ordered by the server's
// sequence of their writes, so a message claiming the largest version
// there is neither applies nor blocks the next real change; and a replica
// that was away while they changed reads them when it is back.
func TestSettingsCannotBePinned(t *testing.T) {
	srv := bustest.Server(t, bus.EmbeddedConfig{Port: -1, StoreDir: t.TempDir()})
	a := startSharer(t, bustest.Connect(t, srv.ClientURL()), "fe-a", nil)
	b := startSharer(t, bustest.Connect(t, srv.ClientURL()), "fe-b", nil)
	waitFor(t, "peers see each other", func() bool { return len(a.s.Status().Peers) == 1 && len(b.s.Status().Peers) == 1 })

	forger := bustest.Connect(t, srv.ClientURL())
	_ = forger.Publish(bus.Subjects{Namespace: "t"}.Replicas(),
		[]byte(`{"replica":"x","epoch":1,"seq":1,"settings":{"policy":"random","version":9223372036854775807,"by":"zzzz"}}`))
	_ = forger.Flush()
	b.s.SetSettings("round-robin", "never")
	waitFor(t, "a applies b's change", func() bool {
		return a.f.check(func(f *fakeApplier) bool {
			return len(f.settings) > 0 && f.settings[len(f.settings)-1].Policy == "round-robin"
		})
	})
	if a.f.check(func(f *fakeApplier) bool {
		for _, st := range f.settings {
			if st.Policy == "random" {
				return true
			}
		}
		return false
	}) {
		t.Error("a applied the forged settings")
	}
	a.s.SetSettings("least-loaded", "auto")
	waitFor(t, "b applies a's later change", func() bool {
		return b.f.check(func(f *fakeApplier) bool {
			return len(f.settings) > 0 && f.settings[len(f.settings)-1].Policy == "least-loaded"
		})
	})

	// b goes away; the settings change twice; a new b reads them at once.
	b.stop()
	a.s.SetSettings("kv", "never")
	a.s.SetSettings("round-robin", "always")
	waitFor(t, "a's change stored", func() bool { return a.s.Status().Settings.Rev > 0 && a.s.Status().Settings.Policy == "round-robin" })
	c := startSharer(t, bustest.Connect(t, srv.ClientURL()), "fe-c", nil)
	waitFor(t, "a replica back on the bus reads the settings", func() bool {
		return c.f.check(func(f *fakeApplier) bool {
			return len(f.settings) == 1 && f.settings[0].Policy == "round-robin" && f.settings[0].Disagg == "always"
		})
	})
}

func TestApproxCoalescedAndBounded(t *testing.T) {
	srv := bustest.Server(t, bus.EmbeddedConfig{Port: -1, DisableJetStream: true})
	s, err := New(Config{NC: bustest.Connect(t, srv.ClientURL()), Apply: newFake(), MaxPendingApprox: 4})
	if err != nil {
		t.Fatal(err)
	}
	s.alone.Store(false) // as if a peer were known: decisions are queued for it
	now := time.Now()
	s.Approx("w1", []uint64{1, 2, 3}, now)
	s.Approx("w1", []uint64{1, 2, 3}, now.Add(time.Second)) // already shared: coalesced
	if n := len(s.pendApprox); n != 3 {
		t.Errorf("pending after a repeat = %d, want 3", n)
	}
	s.Approx("w2", []uint64{4, 5, 6}, now)
	if n := len(s.pendApprox); n != 4 {
		t.Errorf("pending = %d, want the bound 4", n)
	}
	if got := counter(s.m.dropped.WithLabelValues("approx")); got != 2 {
		t.Errorf("dropped = %v, want 2", got)
	}
}

func counter(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

// BenchmarkApprox is the cost a routing decision pays to share its
// approximate-index record: a 100-block prompt whose prefix was shared
// recently (the common case, coalesced) and a new one.
func BenchmarkApprox(b *testing.B) {
	srv := bustest.Server(b, bus.EmbeddedConfig{Port: -1, DisableJetStream: true})
	s, err := New(Config{NC: bustest.Connect(b, srv.ClientURL()), Apply: newFake()})
	if err != nil {
		b.Fatal(err)
	}
	hashes := make([]uint64, 100)
	for i := range hashes {
		hashes[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	now := time.Now()
	b.Run("repeated-prefix", func(b *testing.B) {
		s.Approx("w1", hashes, now)
		b.ReportAllocs()
		for b.Loop() {
			s.Approx("w1", hashes, now)
		}
	})
	b.Run("new-prefix", func(b *testing.B) {
		b.ReportAllocs()
		n := uint64(0)
		for b.Loop() {
			n++
			for i := range hashes {
				hashes[i] = n<<32 | uint64(i)
			}
			s.Approx("w1", hashes, now)
			if len(s.pendApprox) > 16384 {
				s.mu.Lock()
				clear(s.pendApprox) // as a flush would
				s.mu.Unlock()
			}
		}
	})
}

// TestOneRequestOnTwoWorkers: a disaggregated request is in flight on its
// decode worker (booked at routing, with nothing to prefill) while its
// prefill runs on another, under one ID. Peers see both, an update of the
// decode worker's blocks, and finishing the prefill leaves the decode
// worker's entry, also across a full set.
func TestOneRequestOnTwoWorkers(t *testing.T) {
	srv := bustest.Server(t, bus.EmbeddedConfig{Port: -1, DisableJetStream: true})
	a := startSharer(t, bustest.Connect(t, srv.ClientURL()), "fe-a", nil)
	b := startSharer(t, bustest.Connect(t, srv.ClientURL()), "fe-b", nil)
	waitFor(t, "peers see each other", func() bool { return len(a.s.Status().Peers) == 1 && len(b.s.Status().Peers) == 1 })

	a.s.Started("d1", "r1", 0, 12)
	a.s.Started("p1", "r1", 12, 12)
	waitFor(t, "b sees r1 on d1 and p1", func() bool {
		return b.f.check(func(f *fakeApplier) bool { return len(f.onWorker) == 2 })
	})
	a.s.Finished("p1", "r1")
	a.s.Started("d1", "r1", 4, 12) // the remote prefill failed: d1 prefills what it lacks
	waitFor(t, "b sees p1 finished and d1 updated", func() bool {
		return b.f.check(func(f *fakeApplier) bool {
			n, ok := f.onWorker["d1 fe-a/r1"]
			return len(f.onWorker) == 1 && ok && n == 4
		})
	})
	a.s.flush(true)
	a.s.Started("w9", "marker", 1, 1) // published after the full set, on the same connection
	waitFor(t, "b applies the full set", func() bool {
		return b.f.check(func(f *fakeApplier) bool { return f.inflight["fe-a/marker"] == "w9" })
	})
	if !b.f.check(func(f *fakeApplier) bool { n, ok := f.onWorker["d1 fe-a/r1"]; return ok && n == 4 }) {
		t.Error("a full set lost r1's entry on d1")
	}
}

// TestStoredResponsesShared: a response one replica saw stored reaches
// every peer, with its worker, and not the replica itself.
func TestStoredResponsesShared(t *testing.T) {
	srv := bustest.Server(t, bus.EmbeddedConfig{Port: -1, StoreDir: t.TempDir()})
	a := startSharer(t, bustest.Connect(t, srv.ClientURL()), "fe-a", nil)
	b := startSharer(t, bustest.Connect(t, srv.ClientURL()), "fe-b", nil)
	waitFor(t, "the peers see each other", func() bool { return len(a.s.Status().Peers) == 1 && len(b.s.Status().Peers) == 1 })
	a.s.StoredResponse("resp_1", "w1")
	a.s.StoredResponse("resp_2", "w2")
	waitFor(t, "b learns both responses", func() bool {
		return b.f.check(func(f *fakeApplier) bool { return f.stored["resp_1"] == "w1" && f.stored["resp_2"] == "w2" })
	})
	if a.f.check(func(f *fakeApplier) bool { return len(f.stored) > 0 }) {
		t.Errorf("a replica applied its own stored responses")
	}
}

// TestAloneSendsNothingPerRequest checks that a replica with no peer
// publishes nothing per request, and that a peer appearing later still
// gets what it has in flight.
func TestAloneSendsNothingPerRequest(t *testing.T) {
	srv := bustest.Server(t, bus.EmbeddedConfig{Port: -1, DisableJetStream: true})
	// Not running: no hello and no periodic full share, only what the
	// requests themselves cause.
	lone, err := New(Config{NC: bustest.Connect(t, srv.ClientURL()), Subjects: bus.Subjects{Namespace: "t"}, ID: "fe-lone", Apply: newFake()})
	if err != nil {
		t.Fatal(err)
	}
	a := startSharer(t, bustest.Connect(t, srv.ClientURL()), "fe-a", nil)
	for _, s := range []*Sharer{lone, a.s} {
		for i := 0; i < 50; i++ {
			id := fmt.Sprintf("r%d", i)
			s.Started("w1", id, 4, 8)
			s.Approx("w1", []uint64{uint64(i) + 1}, time.Now())
			if i%2 == 0 {
				s.FirstToken("w1", id)
				s.Finished("w1", id)
			}
		}
	}
	lone.flush(false)
	if got := counter(lone.m.messages.WithLabelValues("sent")); got != 0 {
		t.Errorf("a replica alone sent %v messages for 50 requests, want 0", got)
	}
	b := startSharer(t, bustest.Connect(t, srv.ClientURL()), "fe-b", nil)
	waitFor(t, "the newcomer learns a's 25 requests in flight", func() bool {
		return b.f.check(func(f *fakeApplier) bool {
			n := 0
			for id := range f.inflight {
				if strings.HasPrefix(id, "fe-a/") {
					n++
				}
			}
			return n == 25
		})
	})
	// With a peer known, changes flow again.
	a.s.Finished("w1", "r1")
	waitFor(t, "a finish reaches the peer", func() bool {
		return b.f.check(func(f *fakeApplier) bool { _, ok := f.inflight["fe-a/r1"]; return !ok })
	})
}
