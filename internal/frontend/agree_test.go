package frontend

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

func TestJudge(t *testing.T) {
	const bs = 16
	for _, tc := range []struct {
		name                           string
		predicted, gpu, cached, prompt int
		want                           uint8
	}{
		{"both agree", 64, 64, 64, 100, verdictAgree},
		{"engine recomputes the last token of a whole prompt", 64, 64, 48, 64, verdictAgree},
		{"less than a block more", 32, 32, 40, 100, verdictAgree},
		{"blind: nothing predicted", 0, 0, 592, 613, verdictBlind},
		{"blind: a block more", 32, 32, 48, 100, verdictBlind},
		{"stale: nothing served", 64, 64, 0, 100, verdictStale},
		{"stale: a block less", 64, 64, 48, 100, verdictStale},
		{"lower tiers the engine declined to load", 64, 16, 16, 100, verdictAgree},
		{"less than a block of the gpu prediction", 64, 32, 17, 100, verdictAgree},
		{"unknown prompt length", 64, 64, 64, 0, verdictAgree},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judge(tc.predicted, tc.gpu, tc.cached, tc.prompt, bs); got != tc.want {
				t.Errorf("judge(%d, %d, %d, %d) = %d, want %d", tc.predicted, tc.gpu, tc.cached, tc.prompt, got, tc.want)
			}
		})
	}
}

// agreeHarness is a frontend whose fake worker reports cached tokens and
// whose fake router predicts an overlap, both settable.
type agreeHarness struct {
	*harness
	w *fakeWorker
}

func newAgreeHarness(t *testing.T, logs *syncBuffer) *agreeHarness {
	t.Helper()
	w := newFakeWorker(t, "w-a")
	cfg := Config{}
	if logs != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	h := newHarness(t, cfg, Deps{Index: fakeIndex{}, Events: healthyEvents{}}, w.worker(RoleAggregated))
	return &agreeHarness{harness: h, w: w}
}

// set makes the router predict overlap blocks and the worker report cached
// tokens.
func (h *agreeHarness) set(overlap, cached int) {
	h.router.mu.Lock()
	h.router.overlap = overlap
	h.router.mu.Unlock()
	h.w.mu.Lock()
	h.w.cached = cached
	h.w.mu.Unlock()
}

func (h *agreeHarness) send(t *testing.T, n int, stream bool) {
	t.Helper()
	body := `{"model":"qwen3-0.6b","prompt":"the same prefix every time","max_tokens":4}`
	if stream {
		body = `{"model":"qwen3-0.6b","prompt":"the same prefix every time","max_tokens":4,"stream":true}`
	}
	for range n {
		if resp, b := h.do(t, "POST", "/v1/completions", body); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
	}
}

func (h *agreeHarness) health(t *testing.T) WorkerHealth {
	t.Helper()
	hl := h.s.Health()
	if len(hl.Workers) != 1 {
		t.Fatalf("health has %d workers", len(hl.Workers))
	}
	return hl.Workers[0]
}

// TestBlindIndexTurnsInconsistent: an engine that serves from cache what
// the index never predicts (the tokenizer mismatch of a third-party
// engine) makes the worker inconsistent within agreeTripMajority requests,
// with the figures in the cause, /health, metrics and the log; the router
// is told to route it by the approximate index; a clean window brings it
// back.
func TestBlindIndexTurnsInconsistent(t *testing.T) {
	var logs syncBuffer
	h := newAgreeHarness(t, &logs)
	h.set(0, 592)
	h.send(t, agreeTripMajority-1, true)
	if wh := h.health(t); wh.Agreement.Inconsistent || wh.Agreement.WindowBlind != agreeTripMajority-1 {
		t.Fatalf("after %d blind requests: %+v, want %d blind and still consistent", agreeTripMajority-1, wh.Agreement, agreeTripMajority-1)
	}
	h.send(t, 1, false)
	wh := h.health(t)
	ag := wh.Agreement
	if !ag.Inconsistent || ag.Blind != agreeTripMajority || ag.Requests != agreeTripMajority || ag.CachedTokens != 592*agreeTripMajority || ag.PredictedTokens != 0 || ag.Trips != 1 {
		t.Fatalf("after %d blind requests: agreement %+v", agreeTripMajority, ag)
	}
	want := "the engine served 2368 cached tokens where the index predicted 0, on 4 of 4 requests"
	if !strings.Contains(ag.Cause, want) || wh.Events.State != StateInconsistent || wh.Events.Cause != ag.Cause {
		t.Errorf("events %+v, cause %q; want state inconsistent, cause with %q", wh.Events, ag.Cause, want)
	}
	if hl := h.s.Health(); hl.Status != HealthDegraded || !strings.Contains(hl.Reason, "w-a events inconsistent") {
		t.Errorf("health %s (%s), want degraded by w-a's inconsistency", hl.Status, hl.Reason)
	}
	if !strings.Contains(logs.String(), "inconsistent") || !strings.Contains(logs.String(), "2368") {
		t.Errorf("log lacks the inconsistency: %s", logs.String())
	}
	if got := value(t, h.s.m.engineCached.WithLabelValues("w-a")); got != 2368 {
		t.Errorf("engine cached tokens = %v, want 2368", got)
	}
	if got := value(t, h.s.m.indexPredicted.WithLabelValues("w-a")); got != 0 {
		t.Errorf("index predicted tokens = %v, want 0", got)
	}
	h.send(t, 1, false)
	picks := h.router.recorded()
	if last := picks[len(picks)-1]; !slices.Equal(last.IndexSuspect, []string{"w-a"}) {
		t.Errorf("router got IndexSuspect %v, want [w-a]", last.IndexSuspect)
	}
	if first := picks[0]; first.IndexSuspect != nil {
		t.Errorf("first pick had IndexSuspect %v", first.IndexSuspect)
	}

	// Fixed: the index predicts what the engine serves. The fresh window
	// holds the one blind request since the trip.
	h.set(37, 592)
	h.send(t, agreeRecoverCount-2, false)
	if !h.health(t).Agreement.Inconsistent {
		t.Fatalf("recovered before a clean window of %d", agreeRecoverCount)
	}
	h.send(t, 1, true)
	wh = h.health(t)
	if wh.Agreement.Inconsistent || wh.Events.State != StateHealthy {
		t.Errorf("after a clean window: events %+v, agreement %+v", wh.Events, wh.Agreement)
	}
	if !strings.Contains(logs.String(), "consistent again") {
		t.Errorf("log lacks the recovery: %s", logs.String())
	}
}

// TestStaleIndexTurnsInconsistent: an index that predicts blocks the engine
// no longer has (missed removals) is caught the same way.
func TestStaleIndexTurnsInconsistent(t *testing.T) {
	h := newAgreeHarness(t, nil)
	h.set(8, 0)
	h.send(t, agreeTripMajority, false)
	ag := h.health(t).Agreement
	if !ag.Inconsistent || ag.Stale != agreeTripMajority || !strings.Contains(ag.Cause, "index stale: the index predicted 512 cached tokens where the engine served 0, on 4 of 4 requests") {
		t.Errorf("agreement %+v", ag)
	}
}

func TestSystematic(t *testing.T) {
	for _, tc := range []struct {
		count, n int
		want     bool
	}{
		{3, 3, false}, {4, 4, true}, {4, 7, true}, {4, 8, false}, {7, 28, false}, {8, 32, true}, {8, 33, false}, {12, 50, false}, {13, 50, true},
	} {
		if got := systematic(tc.count, tc.n); got != tc.want {
			t.Errorf("systematic(%d, %d) = %v, want %v", tc.count, tc.n, got, tc.want)
		}
	}
}

// TestAgreementToleratesNoise: disagreement below a quarter of the window
// (races, evictions between pick and prefill) never trips.
func TestAgreementToleratesNoise(t *testing.T) {
	h := newAgreeHarness(t, nil)
	for i := range 200 {
		if i%5 == 0 {
			h.set(0, 64) // blind
		} else {
			h.set(4, 64)
		}
		h.send(t, 1, i%2 == 0)
	}
	ag := h.health(t).Agreement
	if ag.Inconsistent || ag.Trips != 0 || ag.Blind != 40 || ag.Requests != 200 {
		t.Errorf("agreement %+v, want 40 blind of 200 and never inconsistent", ag)
	}
}

// TestUnreportedCachedTokens: answers without cached_tokens are counted,
// not judged.
func TestUnreportedCachedTokens(t *testing.T) {
	w := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{}, Deps{Index: fakeIndex{}}, w.worker(RoleAggregated))
	h.s.agree(agreeInput{worker: "w-a", predicted: 4, usage: &openai.Usage{PromptTokens: 100}})
	h.s.agree(agreeInput{worker: "w-a", predicted: 4})
	if ag := h.s.Health().Workers[0].Agreement; ag.Unreported != 2 || ag.Requests != 0 {
		t.Errorf("agreement %+v, want 2 unreported, none judged", ag)
	}
}

// TestBlindRaceExcused: a response whose cached blocks the index shows once
// it is in (they were being computed when the router looked) is no
// disagreement.
func TestBlindRaceExcused(t *testing.T) {
	w := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{}, Deps{Index: fakeIndex{"w-a": 100}}, w.worker(RoleAggregated))
	for range 2 * agreeTripCount {
		h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"`+strings.Repeat("a long prompt ", 20)+`","max_tokens":4}`)
	}
	ag := h.s.Health().Workers[0].Agreement
	if ag.Blind != 0 || ag.Requests != 2*agreeTripCount || ag.Inconsistent {
		t.Errorf("agreement %+v, want no blind request", ag)
	}
}

// TestAgreementOnRemotePrefill: the decode worker of a remote prefill
// reports the KV it pulled as cached, which no index predicts: it is not
// judged. The prefill worker is, on its own cache report.
func TestAgreementOnRemotePrefill(t *testing.T) {
	p, d := newFakeWorker(t, "w-p"), newFakeWorker(t, "w-d")
	d.cached = 592
	h := newHarness(t, Config{}, Deps{Index: fakeIndex{}, Gate: &fakeGate{decision: GateDecision{Remote: true}}}, p.worker(RolePrefill), d.worker(RoleDecode))
	h.router.prefer = []string{"w-d", "w-p"}
	h.router.overlap = 2 // 32 tokens, what the fake prefill worker reports cached
	const n = 2 * agreeTripCount
	for range n {
		h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x","max_tokens":4}`)
	}
	for _, wh := range h.s.Health().Workers {
		switch ag := wh.Agreement; {
		case wh.ID == "w-d" && ag.Requests != 0:
			t.Errorf("decode worker judged %d requests of a remote prefill", ag.Requests)
		case wh.ID == "w-p" && (ag.Requests != n || ag.Blind+ag.Stale != 0 || ag.CachedTokens != 32*n):
			t.Errorf("prefill worker's agreement %+v, want %d agreeing prefills", ag, n)
		}
	}
	// A prefill worker whose cache the index cannot see turns inconsistent.
	h.router.mu.Lock()
	h.router.overlap = 0
	h.router.mu.Unlock()
	for range agreeTripCount {
		h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x","max_tokens":4}`)
	}
	for _, wh := range h.s.Health().Workers {
		if wh.ID == "w-p" && !wh.Agreement.Inconsistent {
			t.Errorf("prefill worker blind on its last %d prefills is not inconsistent: %+v", agreeTripCount, wh.Agreement)
		}
	}
}

// TestPlainStreamCountsUsage: a stream whose client did not ask for usage
// still counts in the cache-hit metrics (the frontend asks the worker for
// the usage chunk), and the client gets exactly the stream it would have
// without the frontend: no usage chunk.
func TestPlainStreamCountsUsage(t *testing.T) {
	for _, tc := range []struct {
		name, path, body, wantSent string
		chat                       bool
	}{
		{"chat", "/v1/chat/completions", `{"model":"qwen3-0.6b","messages":[{"role":"user","content":"hi"}],"stream":true}`,
			`{"stream_options":{"include_usage":true},"model":"qwen3-0.6b","messages":[{"role":"user","content":"hi"}],"stream":true}`, true},
		{"completions", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"hi","stream":true,"max_tokens":5}`,
			`{"stream_options":{"include_usage":true},"model":"qwen3-0.6b","prompt":"hi","stream":true,"max_tokens":5}`, false},
		{"other stream options kept", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"hi","stream":true,"stream_options":{"include_usage":false,"x_option":7}}`,
			`{"model":"qwen3-0.6b","prompt":"hi","stream":true,"stream_options":{"x_option":7,"include_usage":true}}`, false},
		{"continuous usage off without include_usage", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"hi","stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}`,
			`{"model":"qwen3-0.6b","prompt":"hi","stream":true,"stream_options":{"continuous_usage_stats":false,"include_usage":true}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWorker(t, "w-a")
			h := newHarness(t, Config{}, Deps{}, w.worker(RoleAggregated))
			resp, body := h.do(t, "POST", tc.path, tc.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var want bytes.Buffer
			for _, ev := range streamEvents(tc.chat, 5, false, nil) {
				want.WriteString("data: " + string(ev) + "\n\n")
			}
			want.WriteString("data: [DONE]\n\n")
			if !bytes.Equal(body, want.Bytes()) {
				t.Errorf("client stream differs from the plain one:\n got %q\nwant %q", body, want.Bytes())
			}
			if got := w.received(); len(got) != 1 || !jsonEqual(t, got[0], []byte(tc.wantSent)) {
				t.Errorf("worker received %s, want %s", got, tc.wantSent)
			}
			if got := value(t, h.s.m.cacheHit); got != 32 {
				t.Errorf("cache-hit tokens = %v, want 32", got)
			}
			if got := value(t, h.s.m.promptToks); got != 100 {
				t.Errorf("prompt tokens = %v, want 100", got)
			}
		})
	}
}

func jsonEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya) && bytes.HasPrefix(a, []byte(`{"stream_options"`)) == bytes.HasPrefix(b, []byte(`{"stream_options"`))
}

// agreeInputFor is an agreeing response of a 640-token prompt.
func agreeInputFor(worker string) agreeInput {
	return agreeInput{worker: worker, predicted: 39, gpuPredicted: 39,
		usage: &openai.Usage{PromptTokens: 640, PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: 624}}}
}

// TestAgreeAllocs pins the bookkeeping of an agreeing response at zero
// allocations.
func TestAgreeAllocs(t *testing.T) {
	h := newHarness(t, Config{}, Deps{}, Worker{ID: "w-a", Role: RoleAggregated, Model: testModel})
	in := agreeInputFor("w-a")
	h.s.agree(in) // the worker's state and series
	if n := testing.AllocsPerRun(1000, func() { h.s.agree(in) }); n != 0 {
		t.Errorf("agree allocates %v times per response, want 0", n)
	}
	if ag := h.s.Health().Workers[0].Agreement; ag.Requests != 1002 || ag.Blind+ag.Stale != 0 {
		t.Errorf("agreement %+v, want 1002 agreeing requests", ag)
	}
}

// BenchmarkAgree is the index-agreement bookkeeping of one response; the
// target is at most 1 µs and no allocation.
func BenchmarkAgree(b *testing.B) {
	h := newHarness(b, Config{}, Deps{}, Worker{ID: "w-a", Role: RoleAggregated, Model: testModel})
	in := agreeInputFor("w-a")
	h.s.agree(in)
	if ag := h.s.workerState("w-a").agree.status(); ag.Requests != 1 || ag.Blind+ag.Stale != 0 {
		b.Fatalf("agreement %+v, want one agreeing request", ag)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		h.s.agree(in)
	}
}

// BenchmarkAgreeParallel is the same from every CPU on one worker: the
// window's lock is the shared part.
func BenchmarkAgreeParallel(b *testing.B) {
	h := newHarness(b, Config{}, Deps{}, Worker{ID: "w-a", Role: RoleAggregated, Model: testModel})
	in := agreeInputFor("w-a")
	h.s.agree(in)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.s.agree(in)
		}
	})
}

// TestAgreementWindowAges: a worker's disagreement older than the window's
// age no longer counts towards tripping.
func TestAgreementWindowAges(t *testing.T) {
	var a agreement
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	for range agreeTripMajority - 1 {
		a.add(now, m, "w", 0, 64, verdictBlind)
	}
	now = now.Add(agreeWindowAge + time.Second)
	if ch := a.add(now, m, "w", 0, 64, verdictBlind); ch.changed {
		t.Fatalf("tripped on blind requests older than %v", agreeWindowAge)
	}
	if st := a.status(); st.Window != 1 || st.WindowBlind != 1 || st.Blind != agreeTripMajority {
		t.Errorf("status %+v, want a window of 1 and %d blind in total", st, agreeTripMajority)
	}
}

// syncBuffer is a log sink safe for the server's goroutines and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAgreementSkipsUntrustedIndex: while a worker's events are not healthy
// (an outage, a resync), the index is known to lag its engine and is not
// judged, so the blind answers of that time cannot keep the worker
// inconsistent after its resync; once healthy again it is judged.
func TestAgreementSkipsUntrustedIndex(t *testing.T) {
	w := newFakeWorker(t, "w-a")
	ev := &fakeEvents{m: map[string]EventStatus{"w-a": {State: "resyncing"}}}
	h := &agreeHarness{harness: newHarness(t, Config{}, Deps{Index: fakeIndex{}, Events: ev}, w.worker(RoleAggregated)), w: w}
	h.set(0, 592)
	h.send(t, 2*agreeTripMajority, false)
	if ag := h.health(t).Agreement; ag.Requests != 0 || ag.Inconsistent {
		t.Fatalf("while resyncing: agreement %+v, want nothing judged", ag)
	}
	ev.set("w-a", EventStatus{State: StateHealthy})
	h.send(t, agreeTripMajority, false)
	if ag := h.health(t).Agreement; ag.Requests != agreeTripMajority || !ag.Inconsistent {
		t.Errorf("healthy again: agreement %+v, want %d judged and inconsistent", ag, agreeTripMajority)
	}
}

// shiftingIndex is an index whose one worker's overlap a test moves.
type shiftingIndex struct {
	worker string
	blocks atomic.Int64
}

func (x *shiftingIndex) Overlaps(hashes []uint64) map[string]int {
	return map[string]int{x.worker: min(int(x.blocks.Load()), len(hashes))}
}

// graceHarness is a harness whose blind verdicts wait out a grace that the
// test ends by firing the timers it collected.
type graceHarness struct {
	*harness
	idx    *shiftingIndex
	mu     sync.Mutex
	timers []func()
}

func newGraceHarness(t *testing.T) *graceHarness {
	g := &graceHarness{idx: &shiftingIndex{worker: "w-a"}}
	g.harness = newHarness(t, Config{}, Deps{Index: g.idx}, Worker{ID: "w-a", Role: RoleAggregated, Model: testModel})
	g.s.blindGrace = time.Hour
	g.s.afterFunc = func(d time.Duration, f func()) {
		if d != time.Hour {
			t.Errorf("grace %v, want the server's", d)
		}
		g.mu.Lock()
		g.timers = append(g.timers, f)
		g.mu.Unlock()
	}
	return g
}

// blind judges a response whose 624 cached tokens (39 blocks) the index
// did not predict.
func (g *graceHarness) blind() {
	g.s.agree(agreeInput{worker: "w-a", hashes: make([]uint64, 40), predicted: 0, gpuPredicted: 0,
		usage: &openai.Usage{PromptTokens: 640, PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: 624}}})
}

func (g *graceHarness) fire() {
	g.mu.Lock()
	ts := g.timers
	g.timers = nil
	g.mu.Unlock()
	for _, f := range ts {
		f()
	}
}

// TestBlindWaitsForInFlightEvents: a response that served blocks whose
// Stored event is still on the bus is judged once the grace has passed, on
// the index as it is then; it is not counted while it waits.
func TestBlindWaitsForInFlightEvents(t *testing.T) {
	g := newGraceHarness(t)
	for range agreeTripMajority {
		g.blind()
	}
	if ag := g.s.Health().Workers[0].Agreement; ag.Pending != agreeTripMajority || ag.Requests != 0 {
		t.Fatalf("before the grace: %+v, want %d pending, none judged", ag, agreeTripMajority)
	}
	g.idx.blocks.Store(39) // the events arrive
	g.fire()
	if ag := g.s.Health().Workers[0].Agreement; ag.Pending != 0 || ag.Requests != agreeTripMajority || ag.Blind != 0 || ag.Inconsistent {
		t.Errorf("after the events and the grace: %+v, want %d agreeing", ag, agreeTripMajority)
	}
}

// TestBlindAfterGraceCounts: events that never come leave the verdicts
// blind once the grace has passed, and the worker turns inconsistent.
func TestBlindAfterGraceCounts(t *testing.T) {
	g := newGraceHarness(t)
	for range agreeTripMajority {
		g.blind()
	}
	g.fire()
	if ag := g.s.Health().Workers[0].Agreement; ag.Pending != 0 || ag.Blind != agreeTripMajority || !ag.Inconsistent {
		t.Errorf("after the grace: %+v, want %d blind and inconsistent", ag, agreeTripMajority)
	}
}

// TestBlindPendingBounded: past agreeMaxPending waiting verdicts, a blind
// response counts at once instead of holding more hashes.
func TestBlindPendingBounded(t *testing.T) {
	g := newGraceHarness(t)
	for range agreeMaxPending + 1 {
		g.blind()
	}
	if ag := g.s.Health().Workers[0].Agreement; ag.Pending != agreeMaxPending || ag.Requests != 1 || ag.Blind != 1 {
		t.Errorf("%+v, want %d pending and 1 judged blind", ag, agreeMaxPending)
	}
	g.fire()
	if ag := g.s.Health().Workers[0].Agreement; ag.Pending != 0 || ag.Blind != agreeMaxPending+1 {
		t.Errorf("after the grace: %+v, want all %d blind", ag, agreeMaxPending+1)
	}
}
