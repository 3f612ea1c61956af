package frontend

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/admit"
)

// TestQueuedRequestIsServed: with the only worker at
// --max-inflight-per-worker, a standard request waits in the queue,
// without counting on the worker, and is served once the slot frees.
func TestQueuedRequestIsServed(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	a.setMode(modeSlow)
	h := newHarness(t, Config{MaxInflightPerWorker: 1}, Deps{}, a.worker(RoleAggregated))
	body := `{"model":"qwen3-0.6b","prompt":"x"}`
	codes := make(chan int, 2)
	post := func() {
		resp, err := h.srv.Client().Post(h.srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			codes <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes <- resp.StatusCode
	}
	go post()
	waitFor(t, "first request in flight", func() bool { return h.s.inflightCounter("w-a").Load() == 1 })
	go post()
	waitFor(t, "second request queued", func() bool { return h.s.AdmissionStats().Queued["standard"] == 1 })
	if n := h.s.inflightCounter("w-a").Load(); n != 1 {
		t.Errorf("worker has %d requests in flight while one is queued, want 1", n)
	}
	for range 2 {
		if c := <-codes; c != 200 {
			t.Errorf("status %d, want 200 for both", c)
		}
	}
	if st := h.s.AdmissionStats(); st.Outcomes["queued"] != 1 || st.Outcomes["admitted"] != 1 {
		t.Errorf("outcomes %v, want one admitted at once and one after queueing", st.Outcomes)
	}
}

// TestTenants: a tenant key names the tenant, an unknown key is refused,
// a bad priority is a 400, and an isolated tenant's prompt is sent with
// its own cache_salt.
func TestTenants(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(p, []byte("tenants:\n  - {name: alpha, key: ka}\n  - {name: beta, key: kb, share_cache: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts, err := admit.LoadTenants(p)
	if err != nil {
		t.Fatal(err)
	}
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{Tenants: ts}, Deps{}, a.worker(RoleAggregated))
	body := `{"model":"qwen3-0.6b","prompt":"hello"}`
	if resp, got := h.do(t, "POST", "/v1/completions", body, "Authorization", "Bearer nope"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unknown key: status %d: %s", resp.StatusCode, got)
	}
	if resp, got := h.do(t, "POST", "/v1/completions", body, "Authorization", "Bearer ka", HeaderPriority, "urgent"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad priority: status %d: %s", resp.StatusCode, got)
	}
	for _, key := range []string{"ka", "kb"} {
		if resp, got := h.do(t, "POST", "/v1/completions", body, "Authorization", "Bearer "+key); resp.StatusCode != 200 {
			t.Fatalf("key %s: status %d: %s", key, resp.StatusCode, got)
		}
	}
	bodies := a.received()
	salt := func(b []byte) string {
		var v struct {
			CacheSalt string `json:"cache_salt"`
		}
		_ = json.Unmarshal(b, &v)
		return v.CacheSalt
	}
	if got := salt(bodies[0]); !strings.HasPrefix(got, "sy-tenant-") {
		t.Errorf("alpha's request reached the worker with cache_salt %q, want its tenant salt", got)
	}
	if got := salt(bodies[1]); got != "" {
		t.Errorf("beta shares its cache, but its request carries cache_salt %q", got)
	}
}

// TestDrain: a draining worker gets no new request while another can
// serve; a draining frontend refuses new requests with 503 and says
// "draining" on /health.
func TestDrain(t *testing.T) {
	a, b := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b")
	wa := a.worker(RoleAggregated)
	wa.Draining = true
	h := newHarness(t, Config{}, Deps{}, wa, b.worker(RoleAggregated))
	body := `{"model":"qwen3-0.6b","prompt":"x"}`
	for range 4 {
		resp, got := h.do(t, "POST", "/v1/completions", body)
		if resp.StatusCode != 200 || resp.Header.Get(HeaderWorker) != "w-b" {
			t.Errorf("status %d worker %q, want 200 from w-b: %s", resp.StatusCode, resp.Header.Get(HeaderWorker), got)
		}
	}
	if n := len(a.received()); n != 0 {
		t.Errorf("draining worker received %d requests", n)
	}
	var hl Health
	_, got := h.do(t, "GET", "/health", "")
	if err := json.Unmarshal(got, &hl); err != nil || len(hl.Workers) != 2 || !hl.Workers[0].Draining {
		t.Errorf("/health workers %+v (%v), want w-a shown draining", hl.Workers, err)
	}
	h.s.SetDraining(true)
	resp, got := h.do(t, "POST", "/v1/completions", body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("draining frontend: status %d Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), got)
	}
	resp, got = h.do(t, "GET", "/health", "")
	if err := json.Unmarshal(got, &hl); err != nil || resp.StatusCode != http.StatusServiceUnavailable || hl.Status != HealthDraining {
		t.Errorf("/health while draining: %d %s", resp.StatusCode, got)
	}
}

// fakePeers is the peer replicas' load on each worker.
type fakePeers struct{ n atomic.Int64 }

func (p *fakePeers) PeerInFlight(string) int { return int(p.n.Load()) }

// TestPeersHoldSlots: a worker's slots held by another replica are not
// this one's to fill: a request queues until the peer's finish.
func TestPeersHoldSlots(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	peers := &fakePeers{}
	peers.n.Store(2)
	h := newHarness(t, Config{MaxInflightPerWorker: 2}, Deps{Peers: peers}, a.worker(RoleAggregated))
	code := make(chan int, 1)
	go func() {
		resp, err := h.srv.Client().Post(h.srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"qwen3-0.6b","prompt":"x"}`))
		if err != nil {
			code <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		code <- resp.StatusCode
	}()
	waitFor(t, "request queued behind the peers", func() bool { return h.s.AdmissionStats().Queued["standard"] == 1 })
	if n := len(a.received()); n != 0 {
		t.Fatalf("worker got %d requests while the peers held its slots", n)
	}
	peers.n.Store(1)
	if c := <-code; c != 200 {
		t.Errorf("status %d after a peer slot freed, want 200", c)
	}
}

// fakeQueue predicts each worker's prefill queue.
type fakeQueue struct {
	mu sync.Mutex
	d  map[string]time.Duration
}

func (q *fakeQueue) set(id string, d time.Duration) {
	q.mu.Lock()
	q.d[id] = d
	q.mu.Unlock()
}

func (q *fakeQueue) QueueDelay(id string) (time.Duration, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d, ok := q.d[id]
	return d, ok
}

// TestQueueTTFT: a worker whose predicted prefill queue is over QueueTTFT
// gets no request while another has room; with every worker over it, a
// request waits in the fair queue until one drains.
func TestQueueTTFT(t *testing.T) {
	a, b := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b")
	q := &fakeQueue{d: map[string]time.Duration{"w-a": 5 * time.Second, "w-b": 0}}
	h := newHarness(t, Config{QueueTTFT: 2 * time.Second}, Deps{Queue: q}, a.worker(RoleAggregated), b.worker(RoleAggregated))
	body := `{"model":"qwen3-0.6b","prompt":"x"}`
	for range 3 {
		if resp, got := h.do(t, "POST", "/v1/completions", body); resp.StatusCode != 200 || resp.Header.Get(HeaderWorker) != "w-b" {
			t.Errorf("status %d worker %q, want 200 from w-b (w-a is queued past the objective): %s", resp.StatusCode, resp.Header.Get(HeaderWorker), got)
		}
	}
	q.set("w-b", 3*time.Second)
	code := make(chan int, 1)
	go func() {
		resp, err := h.srv.Client().Post(h.srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			code <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		code <- resp.StatusCode
	}()
	waitFor(t, "request queued while every worker is over the objective", func() bool { return h.s.AdmissionStats().Queued["standard"] == 1 })
	q.set("w-a", 0)
	if c := <-code; c != 200 {
		t.Errorf("status %d once w-a drained, want 200", c)
	}
	if n := len(a.received()); n != 1 {
		t.Errorf("w-a got %d requests, want the one that waited", n)
	}
}
