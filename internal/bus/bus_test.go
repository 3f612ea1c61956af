package bus

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestSubjects(t *testing.T) {
	s, err := NewSubjects("team-a")
	if err != nil {
		t.Fatal(err)
	}
	var zero Subjects
	tests := []struct {
		name, got, want string
	}{
		{"kv", s.KVEvents("w1"), "sy.team-a.kv.w1"},
		{"kv all", s.KVEventsAll(), "sy.team-a.kv.*"},
		{"snapshot", s.Snapshot("w1"), "sy.team-a.snap.w1"},
		{"load", s.Load("w1"), "sy.team-a.load.w1"},
		{"load all", s.LoadAll(), "sy.team-a.load.*"},
		{"bucket", s.WorkersBucket(), "sy_team-a_workers"},
		{"zero value namespace", zero.KVEvents("w"), "sy.default.kv.w"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"plain", "default", true},
		{"dash underscore digits", "w-1_2", true},
		{"empty", "", false},
		{"dot splits subject", "a.b", false},
		{"wildcard", "a*", false},
		{"tail wildcard", ">", false},
		{"space", "a b", false},
		{"non-ascii", "café", false},
		{"too long", strings.Repeat("a", 65), false},
	}
	for _, tt := range tests {
		err := ValidateName("namespace", tt.in)
		if got := err == nil; got != tt.ok {
			t.Errorf("%s: ValidateName(%q) = %v, want ok=%v", tt.name, tt.in, err, tt.ok)
		}
	}
	if _, err := NewSubjects("bad.ns"); err == nil {
		t.Errorf("NewSubjects accepted a dotted namespace")
	}
}

func TestEmbeddedTempStoreRemoved(t *testing.T) {
	e, err := StartEmbedded(EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	dir := e.tempDir
	if dir == "" {
		t.Fatal("no temporary store dir")
	}
	nc := connect(t, e.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("jetstream not enabled: %v", err)
	}
	nc.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("store dir %s still exists after Close (stat err %v)", dir, err)
	}
	if err := e.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestNamespacesIsolated(t *testing.T) {
	e := startServer(t)
	nc := connect(t, e.ClientURL())
	a, b := Subjects{Namespace: "a"}, Subjects{Namespace: "b"}
	got := make(chan string, 10)
	sub, err := nc.Subscribe(a.KVEventsAll(), func(m *nats.Msg) { got <- m.Subject })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Publish(b.KVEvents("w1"), []byte("x"))
	nc.Publish(a.KVEvents("w1"), []byte("y"))
	nc.Flush()
	select {
	case s := <-got:
		if s != a.KVEvents("w1") {
			t.Errorf("got message on %s, want only namespace a", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message in namespace a")
	}
}

func testWorker(id string) WorkerInfo {
	return WorkerInfo{ID: id, Role: RoleAggregated, Model: "qwen3-0.6b", HTTPURL: "http://127.0.0.1:1/" + id,
		BlockSize: 16, KVBytesPerToken: 114688, KVEventsEnabled: true, Epoch: 7}
}

// changeLog records OnChange calls.
type changeLog struct {
	mu sync.Mutex
	cs []Change
}

func (l *changeLog) add(c Change) { l.mu.Lock(); l.cs = append(l.cs, c); l.mu.Unlock() }
func (l *changeLog) has(kind ChangeKind, id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.cs {
		if c.Kind == kind && c.Worker.ID == id {
			return true
		}
	}
	return false
}

func openRegistry(t testing.TB, nc *nats.Conn, ttl time.Duration) *Registry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := OpenRegistry(ctx, RegistryConfig{NC: nc, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRegistryRegisterWatchClose(t *testing.T) {
	e := startServer(t)
	ctx := t.Context()
	front := openRegistry(t, connect(t, e.ClientURL()), 0)
	if got, want := front.TTL(), DefaultTTL; got != want {
		t.Errorf("TTL() = %v, want %v", got, want)
	}
	var log changeLog
	w, err := front.WatchWorkers(ctx, WatchConfig{Model: "qwen3-0.6b", BlockSize: 16, OnChange: log.add})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	worker := openRegistry(t, connect(t, e.ClientURL()), 0)
	info := testWorker("w1")
	g, err := worker.Register(ctx, info)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "w1 routable", func() bool { _, ok := w.Worker("w1"); return ok })
	got, _ := w.Worker("w1")
	if got.HTTPURL != info.HTTPURL || got.KVBytesPerToken != info.KVBytesPerToken || got.Epoch != info.Epoch {
		t.Errorf("Worker(w1) = %+v, want %+v", got, info)
	}
	if !log.has(WorkerAdded, "w1") {
		t.Errorf("no WorkerAdded change for w1")
	}

	// A second watcher started now sees the worker in its initial load.
	w2, err := front.WatchWorkers(ctx, WatchConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if ws := w2.Workers(); len(ws) != 1 || ws[0].ID != "w1" {
		t.Errorf("second watcher initial Workers() = %+v, want [w1]", ws)
	}
	w2.Close()

	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	// Deletion is delivered as a marker, well before the TTL.
	eventually(t, DefaultTTL/2, "w1 removed after Close", func() bool { _, ok := w.Worker("w1"); return !ok })
	if !log.has(WorkerRemoved, "w1") {
		t.Errorf("no WorkerRemoved change for w1")
	}
}

// TestRegistryExpiry kills a worker's heartbeat without deleting its entry
// and checks it leaves the view within the TTL, with and without the
// server's expiry markers (the watcher's own sweep must suffice).
func TestRegistryExpiry(t *testing.T) {
	const ttl = 1 * time.Second
	for _, markers := range []bool{true, false} {
		name := "markers"
		if !markers {
			name = "no markers"
		}
		t.Run(name, func(t *testing.T) {
			e := startServer(t)
			nc := connect(t, e.ClientURL())
			ctx := t.Context()
			if !markers {
				// Pre-create the bucket the way an older server would have:
				// bucket TTL but no expiry markers.
				js, err := jetstream.New(nc)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: Subjects{}.WorkersBucket(), TTL: ttl, Storage: jetstream.MemoryStorage}); err != nil {
					t.Fatal(err)
				}
			}
			r := openRegistry(t, nc, ttl)
			if got := r.TTL(); got != ttl {
				t.Fatalf("TTL() = %v, want %v", got, ttl)
			}
			var log changeLog
			w, err := r.WatchWorkers(ctx, WatchConfig{OnChange: log.add})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			reg := prometheus.NewRegistry()
			if err := w.Register(reg); err != nil {
				t.Fatal(err)
			}
			live, err := r.Register(ctx, testWorker("live"))
			if err != nil {
				t.Fatal(err)
			}
			defer live.Close()
			dead, err := r.Register(ctx, testWorker("dead"))
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, 5*time.Second, "both registered", func() bool { return len(w.Workers()) == 2 })

			dead.abandon()
			start := time.Now()
			eventually(t, ttl+2*time.Second, "dead worker gone", func() bool { _, ok := w.Worker("dead"); return !ok })
			// The last refresh was at most TTL/3 before abandon, so removal
			// comes at most one TTL (plus a sweep tick) after it.
			if el := time.Since(start); el > ttl+ttl/2 {
				t.Errorf("dead worker left after %v, want within ttl %v (+ margin)", el, ttl)
			}
			log.mu.Lock()
			for _, c := range log.cs {
				if c.Kind == WorkerRemoved {
					t.Logf("removal of %s: %s", c.Worker.ID, c.Reason)
				}
			}
			log.mu.Unlock()
			// The live worker survives several TTLs on heartbeats alone.
			time.Sleep(2 * ttl) // observation window, not synchronisation
			if _, ok := w.Worker("live"); !ok {
				t.Errorf("live worker dropped while heartbeating")
			}
			if got := metricValue(t, w.routable); got != 1 {
				t.Errorf("switchyard_registry_workers = %v, want 1", got)
			}
		})
	}
}

func TestRegistryRefusesIncompatible(t *testing.T) {
	e := startServer(t)
	ctx := t.Context()
	r := openRegistry(t, connect(t, e.ClientURL()), time.Second)
	var log changeLog
	w, err := r.WatchWorkers(ctx, WatchConfig{Model: "qwen3-0.6b", BlockSize: 16, OnChange: log.add})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	good := testWorker("good")
	badBlock := testWorker("bad-block")
	badBlock.BlockSize = 32
	badModel := testWorker("bad-model")
	badModel.Model = "llama-3.1-8b"
	for _, info := range []WorkerInfo{good, badBlock, badModel} {
		g, err := r.Register(ctx, info)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
	}
	eventually(t, 5*time.Second, "two refused", func() bool { return len(w.Refused()) == 2 })
	if ws := w.Workers(); len(ws) != 1 || ws[0].ID != "good" {
		t.Errorf("Workers() = %+v, want only good", ws)
	}
	ref := w.Refused()
	wantReason := map[string][]string{
		"bad-block": {"32", "16", "block size"},
		"bad-model": {`"llama-3.1-8b"`, `"qwen3-0.6b"`},
	}
	for _, rw := range ref {
		for _, s := range wantReason[rw.Worker.ID] {
			if !strings.Contains(rw.Reason, s) {
				t.Errorf("refusal of %s: reason %q does not mention %s", rw.Worker.ID, rw.Reason, s)
			}
		}
		if !log.has(WorkerRefused, rw.Worker.ID) {
			t.Errorf("no WorkerRefused change for %s", rw.Worker.ID)
		}
	}
	if got := metricValue(t, w.refusals); got != 2 {
		t.Errorf("refusals counted = %v, want 2 (heartbeats must not recount)", got)
	}
	// Heartbeats of refused workers must not recount them.
	time.Sleep(r.TTL()) // observation window spanning several heartbeats
	if got := metricValue(t, w.refusals); got != 2 {
		t.Errorf("refusals after heartbeats = %v, want 2", got)
	}
}

func TestCheckCompatible(t *testing.T) {
	base := testWorker("w")
	tests := []struct {
		name   string
		mutate func(*WorkerInfo)
		model  string
		block  int
		errHas string
	}{
		{"compatible", func(*WorkerInfo) {}, "qwen3-0.6b", 16, ""},
		{"any model any block", func(w *WorkerInfo) { w.Model = "x"; w.BlockSize = 64 }, "", 0, ""},
		{"model", func(w *WorkerInfo) { w.Model = "x" }, "qwen3-0.6b", 16, `"x"`},
		{"block", func(w *WorkerInfo) { w.BlockSize = 32 }, "qwen3-0.6b", 16, "32"},
		{"role", func(w *WorkerInfo) { w.Role = "boss" }, "", 0, "role"},
		{"zero block", func(w *WorkerInfo) { w.BlockSize = 0 }, "", 0, "block size 0"},
		{"bad id", func(w *WorkerInfo) { w.ID = "a.b" }, "", 0, "worker id"},
		{"alias served", func(w *WorkerInfo) { w.Model = "x"; w.Aliases = []string{"qwen3-0.6b"} }, "qwen3-0.6b", 16, ""},
		{"adapter is no base", func(w *WorkerInfo) { w.Model = "x"; w.Adapters = []Adapter{{Name: "qwen3-0.6b"}} }, "qwen3-0.6b", 16, `"x"`},
		{"alias twice", func(w *WorkerInfo) { w.Aliases = []string{"a", "a"} }, "", 0, `alias "a"`},
		{"adapter shadows model", func(w *WorkerInfo) { w.Adapters = []Adapter{{Name: w.Model}} }, "", 0, "adapter"},
		{"empty adapter", func(w *WorkerInfo) { w.Adapters = []Adapter{{}} }, "", 0, "adapter"},
	}
	for _, tt := range tests {
		w := base
		tt.mutate(&w)
		err := CheckCompatible(w, tt.model, tt.block)
		switch {
		case tt.errHas == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tt.name, err)
		case tt.errHas != "" && (err == nil || !strings.Contains(err.Error(), tt.errHas)):
			t.Errorf("%s: got error %v, want one mentioning %s", tt.name, err, tt.errHas)
		}
	}
}

func TestLoadReports(t *testing.T) {
	e := startServer(t)
	nc := connect(t, e.ClientURL())
	subj := Subjects{}
	got := make(chan LoadReport, 100)
	sub, err := SubscribeLoad(nc, subj, func(r LoadReport) { got <- r })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Publish(subj.Load("w1"), []byte("{not json")) // dropped, must not stop delivery
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() {
		done <- RunLoadReporter(ctx, connect(t, e.ClientURL()), subj, 10*time.Millisecond, func() LoadReport {
			return LoadReport{WorkerID: "w1", Running: 3, KVUsage: 0.5, TotalBlocks: 100, UsedBlocks: 50}
		}, nil)
	}()
	for i := 0; i < 3; i++ {
		select {
		case r := <-got:
			if r.WorkerID != "w1" || r.Running != 3 || r.KVUsage != 0.5 || r.UnixNano == 0 {
				t.Errorf("report = %+v", r)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no load report")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("RunLoadReporter: %v", err)
	}
}

// TestLoadReportsNameTheirSubject: a worker may publish only on its own
// load subject, so the subject says whose report it is. A report on w3's
// subject naming w2 is a forgery, and a message without a worker id (a
// JetStream acknowledgement aimed at the subject, say) is no report: both
// are dropped and counted, and only w3's own reports reach fn.
func TestLoadReportsNameTheirSubject(t *testing.T) {
	e := startServer(t)
	nc := connect(t, e.ClientURL())
	subj := Subjects{}
	got := make(chan LoadReport, 100)
	sub, err := SubscribeLoad(nc, subj, func(r LoadReport) { got <- r })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	pub := connect(t, e.ClientURL())
	pub.Publish(subj.Load("w3"), []byte(`{"worker_id":"w2","running":5000}`))
	pub.Publish(subj.Load("w2"), []byte(`{"stream":"KV_sy_default_workers","seq":7}`))
	pub.Publish(subj.Load("w3"), []byte(`{not json`))
	pub.Publish(subj.Load("w3"), []byte(`{"worker_id":"w3","running":2}`))
	select {
	case r := <-got:
		if r.WorkerID != "w3" || r.Running != 2 {
			t.Errorf("first report delivered = %+v, want w3's own with running 2", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("w3's own report never arrived")
	}
	if n := sub.Rejected(); n != 3 {
		t.Errorf("rejected = %d, want 3", n)
	}
}

// TestCluster runs three NATS nodes in-process and shows a message published
// on one node reaches a subscriber on another.
func TestCluster(t *testing.T) {
	nodes := startCluster(t, 3)
	pub := connect(t, nodes[0].ClientURL())
	subConn := connect(t, nodes[2].ClientURL())
	got := make(chan *nats.Msg, 1000)
	sub, err := subConn.ChanSubscribe("sy.default.kv.*", got)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	subConn.Flush()
	// Interest crosses routes asynchronously: probe until it has arrived.
	probe := func() bool {
		pub.Publish("sy.default.kv.probe", nil)
		select {
		case <-got:
			return true
		case <-time.After(20 * time.Millisecond):
			return false
		}
	}
	eventually(t, 10*time.Second, "interest propagated across the cluster", probe)
	// A probe that missed its 20 ms window may still be on its way (it
	// did, on a loaded host, and came first among the messages below).
	// Every probe was published before this fence from the same
	// connection, so they all arrive before it.
	pub.Publish("sy.default.kv.fence", nil)
	for fenced := false; !fenced; {
		select {
		case m := <-got:
			fenced = m.Subject == "sy.default.kv.fence"
		case <-time.After(5 * time.Second):
			t.Fatal("the fence did not cross the cluster")
		}
	}
	const n = 200
	for i := 0; i < n; i++ {
		pub.Publish("sy.default.kv.w1", []byte{byte(i)})
	}
	pub.Flush()
	for i := 0; i < n; i++ {
		select {
		case m := <-got:
			if m.Subject != "sy.default.kv.w1" || m.Data[0] != byte(i) {
				t.Fatalf("message %d: subject %s data %v (order must be kept)", i, m.Subject, m.Data)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of %d messages crossed the cluster", i, n)
		}
	}
}

// startCluster starts n clustered nodes (plain NATS) seeded from the first.
func startCluster(t testing.TB, n int) []*Embedded {
	t.Helper()
	var nodes []*Embedded
	for i := 0; i < n; i++ {
		cc := &ClusterConfig{Name: "sy-test"}
		if i > 0 {
			cc.Routes = []string{nodes[0].RouteURL()}
		}
		e, err := StartEmbedded(EmbeddedConfig{DisableJetStream: true, ServerName: "n" + string(rune('0'+i)), Cluster: cc})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		nodes = append(nodes, e)
	}
	eventually(t, 10*time.Second, "full route mesh", func() bool {
		for _, e := range nodes {
			if e.NumRoutes() < n-1 {
				return false
			}
		}
		return true
	})
	return nodes
}

// metricValue reads a single-series counter or gauge.
func metricValue(t testing.TB, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("metric %v is neither counter nor gauge", c.Desc())
	return 0
}

// TestRegistryExpiryAsksAlive: a worker whose entry goes unrefreshed stays
// while Alive answers (its own bus link may be what failed) and leaves, once
// Alive fails, with the failure in the reason. The server's expiry marker
// (a purge) is judged the same way.
func TestRegistryExpiryAsksAlive(t *testing.T) {
	const ttl = time.Second
	e := startServer(t)
	ctx := t.Context()
	r := openRegistry(t, connect(t, e.ClientURL()), ttl)
	var answering atomic.Bool
	answering.Store(true)
	var asked atomic.Int64
	var log changeLog
	w, err := r.WatchWorkers(ctx, WatchConfig{OnChange: log.add, Alive: func(ctx context.Context, wi WorkerInfo) error {
		asked.Add(1)
		if answering.Load() {
			return nil
		}
		return errors.New("connection refused")
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	g, err := r.Register(ctx, testWorker("w1"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "w1 registered", func() bool { _, ok := w.Worker("w1"); return ok })
	g.abandon()
	eventually(t, 10*ttl, "Alive asked twice about w1", func() bool { return asked.Load() >= 2 })
	if _, ok := w.Worker("w1"); !ok {
		t.Fatalf("w1 dropped although Alive answered")
	}
	answering.Store(false)
	eventually(t, 10*ttl, "w1 gone once Alive fails", func() bool { _, ok := w.Worker("w1"); return !ok })
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, c := range log.cs {
		if c.Kind == WorkerRemoved && !strings.Contains(c.Reason, "connection refused") {
			t.Errorf("removal reason %q does not say why the health check failed", c.Reason)
		}
	}
}
