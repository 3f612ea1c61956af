package router

import (
	"container/list"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

// fakeClock is a settable clock for the approximate index's TTL and load
// report freshness.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestRouter(t testing.TB, cfg Config) (*Router, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	cfg.Now = clk.Now
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, clk
}

func hashes(seed, n int) []uint64 {
	toks := make([]uint32, n*4)
	for i := range toks {
		toks[i] = uint32(seed*7919 + i)
	}
	return kvindex.HashChain(nil, "", toks, 4)
}

func TestPickUsesIndex(t *testing.T) {
	idx := kvindex.New(kvindex.Config{})
	r, _ := newTestRouter(t, Config{Index: idx})
	h := hashes(1, 10)
	idx.Store("b", h[:7])
	idx.Store("c", h[:3])
	cands := []Worker{{ID: "a", EventsHealthy: true}, {ID: "b", EventsHealthy: true}, {ID: "c", EventsHealthy: true}}
	d, err := r.Pick(&Request{Hashes: h}, cands)
	if err != nil {
		t.Fatal(err)
	}
	if d.Worker != "b" || d.OverlapBlocks != 7 || d.Approx || d.Cost != 3 {
		t.Errorf("pick = %+v, want b with overlap 7, cost 3, not approx", d)
	}
}

func TestApproxIndexForUnhealthyWorkers(t *testing.T) {
	idx := kvindex.New(kvindex.Config{})
	r, clk := newTestRouter(t, Config{Index: idx, ApproxTTL: time.Minute})
	h := hashes(2, 8)
	silent := []Worker{{ID: "a"}, {ID: "b"}, {ID: "c"}}

	first, err := r.Pick(&Request{Hashes: h}, silent)
	if err != nil {
		t.Fatal(err)
	}
	if first.OverlapBlocks != 0 {
		t.Fatalf("cold pick credited %d blocks", first.OverlapBlocks)
	}
	for i := 0; i < 5; i++ {
		d, _ := r.Pick(&Request{Hashes: h}, silent)
		if d.Worker != first.Worker || d.OverlapBlocks != 8 || !d.Approx {
			t.Fatalf("repeat %d = %+v, want %s with approx overlap 8", i, d, first.Worker)
		}
	}
	// A longer prompt sharing the prefix follows it too, credited with the prefix.
	longer := append(append([]uint64{}, h...), hashes(3, 4)...)
	if d, _ := r.Pick(&Request{Hashes: longer}, silent); d.Worker != first.Worker || d.OverlapBlocks != 8 {
		t.Errorf("longer prompt = %+v, want %s with overlap 8", d, first.Worker)
	}

	// Healthy workers are judged on the index alone: it says nobody holds h.
	healthy := []Worker{{ID: "a", EventsHealthy: true}, {ID: "b", EventsHealthy: true}, {ID: "c", EventsHealthy: true}}
	if d, _ := r.Pick(&Request{Hashes: h}, healthy); d.OverlapBlocks != 0 || d.Approx {
		t.Errorf("healthy pick = %+v, want no overlap", d)
	}

	// Past the TTL the records no longer count.
	clk.Advance(61 * time.Second)
	if d, _ := r.Pick(&Request{Hashes: hashes(9, 3)}, silent); d.OverlapBlocks != 0 {
		t.Errorf("unrelated pick = %+v", d)
	}
	d, _ := r.Pick(&Request{Hashes: h}, silent)
	if d.OverlapBlocks != 0 {
		t.Errorf("after TTL: %+v, want overlap 0", d)
	}
}

// TestApproxSourceWhenIndexIsStale: a worker whose events went quiet
// keeps its index entries; when the approximate index credits it with the
// same overlap, that overlap is the approximate index's, and the decision
// says so (the frontend's x-switchyard-overlap-source: approx).
func TestApproxSourceWhenIndexIsStale(t *testing.T) {
	idx := kvindex.New(kvindex.Config{})
	r, _ := newTestRouter(t, Config{Index: idx, ApproxTTL: time.Minute})
	h := hashes(4, 6)
	idx.Store("a", h) // stored while a's events were healthy
	silent := []Worker{{ID: "a"}}
	for i := range 3 {
		d, err := r.Pick(&Request{Hashes: h}, silent)
		if err != nil {
			t.Fatal(err)
		}
		// The first pick has only the index to go on; the later ones have
		// the approximate index's record of the first.
		if want := i > 0; d.OverlapBlocks != 6 || d.Approx != want {
			t.Errorf("pick %d = overlap %d, approx %v; want overlap 6, approx %v", i, d.OverlapBlocks, d.Approx, want)
		}
	}
	// A healthy worker's overlap is the index's, whatever was recorded.
	if d, _ := r.Pick(&Request{Hashes: h}, []Worker{{ID: "a", EventsHealthy: true}}); d.Approx {
		t.Errorf("healthy pick = %+v, want the index as source", d)
	}
}

// TestIndexBlocksBesideApprox: a decision the approximate index won still
// says what the KV-event index alone showed, which the frontend checks
// against the engine's cache report.
func TestIndexBlocksBesideApprox(t *testing.T) {
	idx := kvindex.New(kvindex.Config{})
	r, _ := newTestRouter(t, Config{Index: idx, ApproxTTL: time.Minute})
	h := hashes(4, 8)
	idx.Store("a", h[:3])
	unhealthy := []Worker{{ID: "a"}}
	if d, _ := r.Pick(&Request{Hashes: h}, unhealthy); d.OverlapBlocks != 3 || d.IndexBlocks != 3 || d.Approx {
		t.Fatalf("first pick = %+v, want index overlap 3", d)
	}
	d, _ := r.Pick(&Request{Hashes: h}, unhealthy)
	if d.OverlapBlocks != 8 || !d.Approx || d.IndexBlocks != 3 {
		t.Errorf("repeat = %+v, want approx overlap 8 with index blocks 3", d)
	}
	healthy := []Worker{{ID: "a", EventsHealthy: true}}
	if d, _ := r.Pick(&Request{Hashes: h}, healthy); d.OverlapBlocks != 3 || d.IndexBlocks != 3 || d.Approx {
		t.Errorf("healthy pick = %+v, want index overlap 3", d)
	}
}

func TestApproxIndexIsBounded(t *testing.T) {
	r, _ := newTestRouter(t, Config{ApproxCapacity: 100})
	cands := []Worker{{ID: "a"}, {ID: "b"}}
	for i := 0; i < 200; i++ {
		if _, err := r.Pick(&Request{Hashes: hashes(i, 7)}, cands); err != nil {
			t.Fatal(err)
		}
		if n := r.ApproxLen(); n > 100 {
			t.Fatalf("approx index holds %d hashes, capacity 100", n)
		}
	}
	if n := r.ApproxLen(); n < 90 {
		t.Errorf("approx index holds %d hashes, want about 100", n)
	}
	// The most recent prompt is still remembered, the oldest is not.
	last, _ := r.Pick(&Request{Hashes: hashes(199, 7)}, cands)
	if last.OverlapBlocks != 7 {
		t.Errorf("latest prompt overlap = %d, want 7", last.OverlapBlocks)
	}
	r.Forget(last.Worker)
	if d, _ := r.Pick(&Request{Hashes: hashes(199, 7)}, []Worker{{ID: last.Worker}}); d.OverlapBlocks != 0 {
		t.Errorf("after Forget overlap = %d, want 0", d.OverlapBlocks)
	}
}

func TestLoadTracking(t *testing.T) {
	r, clk := newTestRouter(t, Config{LoadReportTTL: time.Second})
	r.Started("a", "r1", 10, 10)
	r.Started("a", "r2", 4, 4)
	if got, want := r.Load("a"), (Load{QueuedPrefillBlocks: 14, InFlight: 2}); got != want {
		t.Errorf("after start: %+v, want %+v", got, want)
	}
	r.FirstToken("a", "r1")
	if got, want := r.Load("a"), (Load{QueuedPrefillBlocks: 4, ActiveDecodeBlocks: 10, InFlight: 2}); got != want {
		t.Errorf("after first token: %+v, want %+v", got, want)
	}
	// A fresh report corrects upwards, field by field.
	r.ObserveLoad("a", LoadReport{QueuedPrefillBlocks: 2, ActiveDecodeBlocks: 50, Running: 3, Waiting: 1})
	if got, want := r.Load("a"), (Load{QueuedPrefillBlocks: 4, ActiveDecodeBlocks: 50, InFlight: 4}); got != want {
		t.Errorf("with report: %+v, want %+v", got, want)
	}
	clk.Advance(1500 * time.Millisecond)
	if got, want := r.Load("a"), (Load{QueuedPrefillBlocks: 4, ActiveDecodeBlocks: 10, InFlight: 2}); got != want {
		t.Errorf("stale report: %+v, want %+v", got, want)
	}
	r.Finished("a", "r1")
	r.Finished("a", "r2")
	r.Finished("a", "r2") // duplicate: ignored
	if got := r.Load("a"); got != (Load{}) {
		t.Errorf("after finish: %+v, want zero", got)
	}
}

func TestLoadSteersKV(t *testing.T) {
	idx := kvindex.New(kvindex.Config{})
	r, _ := newTestRouter(t, Config{Index: idx})
	h := hashes(4, 10)
	idx.Store("a", h)
	cands := []Worker{{ID: "a", EventsHealthy: true}, {ID: "b", EventsHealthy: true}}
	if d, _ := r.Pick(&Request{Hashes: h}, cands); d.Worker != "a" {
		t.Fatalf("idle: picked %s, want a", d.Worker)
	}
	r.ObserveLoad("a", LoadReport{ActiveDecodeBlocks: 11})
	if d, _ := r.Pick(&Request{Hashes: h}, cands); d.Worker != "b" {
		t.Errorf("a loaded beyond the saved prefill: picked %s, want b", d.Worker)
	}
}

func TestSetPolicyAndPin(t *testing.T) {
	r, _ := newTestRouter(t, Config{Policy: PolicyRoundRobin})
	if r.Policy() != PolicyRoundRobin {
		t.Errorf("policy = %s", r.Policy())
	}
	if err := r.SetPolicy("nope"); err == nil || !strings.HasPrefix(err.Error(), "router: ") {
		t.Errorf("unknown policy err = %v", err)
	}
	if err := r.SetPolicy(PolicyLeastLoaded); err != nil || r.Policy() != PolicyLeastLoaded {
		t.Errorf("SetPolicy: %v, policy %s", err, r.Policy())
	}
	if got := fmt.Sprint(r.Policies()); got != "[kv round-robin random least-loaded]" {
		t.Errorf("policies = %s", got)
	}
	cands := []Worker{{ID: "a"}, {ID: "b"}}
	d, err := r.Pick(&Request{Pin: "b"}, cands)
	if err != nil || d.Worker != "b" || d.Reason != ReasonPinned {
		t.Errorf("pin: %+v, %v", d, err)
	}
	if _, err := r.Pick(&Request{Pin: "z"}, cands); !errors.Is(err, ErrPinNotCandidate) {
		t.Errorf("pin to non-candidate err = %v", err)
	}
	if _, err := r.Pick(&Request{}, nil); !errors.Is(err, ErrNoWorkers) {
		t.Errorf("no candidates err = %v", err)
	}
	if _, err := New(Config{Policy: "bogus"}); err == nil {
		t.Error("New accepted an unknown policy")
	}
}

func TestMetrics(t *testing.T) {
	idx := kvindex.New(kvindex.Config{})
	r, _ := newTestRouter(t, Config{Index: idx})
	reg := prometheus.NewRegistry()
	if err := r.Register(reg); err != nil {
		t.Fatal(err)
	}
	h := hashes(5, 4)
	idx.Store("a", h)
	r.Pick(&Request{Hashes: h}, []Worker{{ID: "a", EventsHealthy: true}}) // hit
	r.Pick(&Request{Hashes: hashes(6, 4)}, []Worker{{ID: "b"}})           // miss
	r.Pick(&Request{Hashes: hashes(6, 4)}, []Worker{{ID: "b"}})           // approx hit
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_router_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := ""
			for _, l := range m.GetLabel() {
				labels += l.GetName() + "=" + l.GetValue() + ","
			}
			got[labels] = m.GetCounter().GetValue()
		}
	}
	for _, outcome := range []string{OutcomeHit, OutcomeMiss, OutcomeApproxHit} {
		key := "outcome=" + outcome + ",policy=kv,"
		if got[key] != 1 {
			t.Errorf("decisions{%s} = %v, want 1 (all: %v)", key, got[key], got)
		}
	}
	if err := r.Register(reg); err == nil {
		t.Error("registering twice succeeded")
	}
}

func TestPickAllocationFree(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	// Without profiles the kv cost is in blocks; with them, in time.
	for _, timed := range []bool{false, true} {
		idx := kvindex.New(kvindex.Config{})
		r, _ := newTestRouter(t, Config{Index: idx})
		h := hashes(7, 32)
		p := h100Profile(t)
		cands := make([]Worker, 16)
		for i := range cands {
			cands[i] = Worker{ID: fmt.Sprintf("w%d", i), EventsHealthy: i%2 == 0}
			if timed {
				cands[i].Profile = &p
			}
			idx.Store(cands[i].ID, h[:i+1])
		}
		req := &Request{Hashes: h, PromptTokens: len(h) * 4, OutputTokens: 64, BlockSize: 4}
		for i := 0; i < 10; i++ { // warm the pool, the approx map and the index result
			r.Pick(req, cands)
		}
		allocs := testing.AllocsPerRun(200, func() {
			if _, err := r.Pick(req, cands); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("warm kv Pick (timed %v) allocates %v times, want 0", timed, allocs)
		}
		// Booking and releasing reuse the tracker's map entries.
		booked := *req
		booked.ID = "r1"
		allocs = testing.AllocsPerRun(200, func() {
			d, err := r.Pick(&booked, cands)
			if err != nil {
				t.Fatal(err)
			}
			r.Release(d.Worker, booked.ID)
		})
		if allocs != 0 {
			t.Errorf("warm kv Pick booking a request (timed %v) allocates %v times, want 0", timed, allocs)
		}
	}
}

func TestConcurrentPicks(t *testing.T) {
	idx := kvindex.New(kvindex.Config{})
	r, _ := newTestRouter(t, Config{Index: idx})
	cands := []Worker{{ID: "a", EventsHealthy: true}, {ID: "b"}, {ID: "c"}}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				h := hashes(i%10, 6)
				d, err := r.Pick(&Request{Hashes: h}, cands)
				if err != nil {
					t.Error(err)
					return
				}
				id := fmt.Sprintf("g%d-%d", g, i)
				r.Started(d.Worker, id, 6, 6)
				idx.Store(d.Worker, h)
				r.FirstToken(d.Worker, id)
				r.Finished(d.Worker, id)
				if i%50 == 0 {
					r.SetPolicy([]string{PolicyKV, PolicyRoundRobin}[i%2])
				}
			}
		}()
	}
	wg.Wait()
	for _, c := range cands {
		if got := r.Load(c.ID); got != (Load{}) {
			t.Errorf("%s load after all finished = %+v", c.ID, got)
		}
	}
}

// simWorker is a tiny model of an engine's prefix cache: an LRU of block
// hashes with a fixed capacity. A request's hit is the number of leading
// blocks found; afterwards all its blocks are cached (most recently used).
type simWorker struct {
	cap int
	lru *list.List               // front: most recent
	at  map[uint64]*list.Element // hash → its lru element
}

func (w *simWorker) serve(h []uint64) int {
	hit := 0
	for _, b := range h {
		if _, ok := w.at[b]; !ok {
			break
		}
		hit++
	}
	for _, b := range h {
		if e, ok := w.at[b]; ok {
			w.lru.MoveToFront(e)
		} else {
			w.at[b] = w.lru.PushFront(b)
		}
	}
	for w.lru.Len() > w.cap {
		delete(w.at, w.lru.Remove(w.lru.Back()).(uint64))
	}
	return hit
}

// simulate runs repeated-prefix traffic through a router with KV events off
// on every worker (the index stays empty) and returns the fraction of prompt
// blocks served from cache. With useApprox false the workers are reported
// healthy, so the router trusts the empty index: the "assume an empty cache"
// behaviour the approximate index exists to avoid.
func simulate(t *testing.T, policy string, useApprox bool) float64 {
	t.Helper()
	const (
		nWorkers  = 8
		cacheCap  = 320 // blocks per worker
		nPrefixes = 40  // distinct shared prefixes (system prompts, documents)
		prefixLen = 48  // blocks
		suffixLen = 4   // unique blocks per request
		requests  = 3000
	)
	r, clk := newTestRouter(t, Config{Index: kvindex.New(kvindex.Config{}), Policy: policy, Seed: 1})
	workers := make([]*simWorker, nWorkers)
	cands := make([]Worker, nWorkers)
	for i := range workers {
		workers[i] = &simWorker{cap: cacheCap, lru: list.New(), at: map[uint64]*list.Element{}}
		cands[i] = Worker{ID: fmt.Sprintf("w%d", i), EventsHealthy: !useApprox}
	}
	prefixes := make([][]uint64, nPrefixes)
	for i := range prefixes {
		prefixes[i] = hashes(1000+i, prefixLen)
	}
	rng := rand.New(rand.NewPCG(42, 42))
	hit, total := 0, 0
	for i := 0; i < requests; i++ {
		p := prefixes[rng.IntN(nPrefixes)]
		h := append(append([]uint64{}, p...), hashes(100000+i, suffixLen)...)
		req := &Request{Hashes: h}
		d, err := r.Pick(req, cands)
		if err != nil {
			t.Fatal(err)
		}
		var w int
		fmt.Sscanf(d.Worker, "w%d", &w)
		id := fmt.Sprint(i)
		r.Started(d.Worker, id, len(h)-d.OverlapBlocks, len(h))
		hit += workers[w].serve(h)
		total += len(h)
		r.FirstToken(d.Worker, id)
		r.Finished(d.Worker, id)
		clk.Advance(10 * time.Millisecond)
	}
	return float64(hit) / float64(total)
}

// TestEventsOffSimulation: with KV events off on every worker, kv routing
// with the approximate index keeps repeated prefixes on the workers that
// cached them, and hits the cache far more often than random routing.
func TestEventsOffSimulation(t *testing.T) {
	kv := simulate(t, PolicyKV, true)
	random := simulate(t, PolicyRandom, true)
	blind := simulate(t, PolicyKV, false)
	t.Logf("cache hit ratio with events off: kv+approx %.3f, random %.3f, kv without approx %.3f", kv, random, blind)
	if kv < 0.7 {
		t.Errorf("kv+approx hit ratio %.3f, want ≥ 0.7", kv)
	}
	if kv < 2*random {
		t.Errorf("kv+approx hit ratio %.3f is not at least twice random's %.3f", kv, random)
	}
	if blind > 1.5*random {
		t.Errorf("kv without approx hit %.3f, random %.3f: the simulation does not need the approximate index", blind, random)
	}
}

// TestApproxOffPath: left to the caller's Record, a long prompt's
// decision reaches the approximate index all the same, and the picks of a
// sequence of requests (each recorded before the next, as a client's turns
// are) are the ones inline recording makes.
func TestApproxOffPath(t *testing.T) {
	silent := []Worker{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	prompts := [][]uint64{hashes(4, offPathBlocks), hashes(5, offPathBlocks+8), hashes(4, offPathBlocks), hashes(6, 3), hashes(5, offPathBlocks+8)}
	run := func(off bool) []Decision {
		r, _ := newTestRouter(t, Config{ApproxTTL: time.Minute, ApproxOffPath: off})
		var out []Decision
		for _, h := range prompts {
			d, err := r.Pick(&Request{Hashes: h}, silent)
			if err != nil {
				t.Fatal(err)
			}
			if want := off && len(h) >= offPathBlocks; d.Deferred() != want {
				t.Fatalf("%d-block prompt: Deferred() = %v, want %v", len(h), d.Deferred(), want)
			}
			r.Record(d, h) // the repeats below show it recorded
			out = append(out, d)
		}
		return out
	}
	inline, off := run(false), run(true)
	for i := range inline {
		if inline[i].Worker != off[i].Worker || inline[i].OverlapBlocks != off[i].OverlapBlocks {
			t.Errorf("request %d: inline %+v, off the path %+v", i, inline[i], off[i])
		}
	}
	if off[2].OverlapBlocks != offPathBlocks || !off[2].Approx {
		t.Errorf("repeat of a long prompt = %+v, want approx overlap %d", off[2], offPathBlocks)
	}
}
