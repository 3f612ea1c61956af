package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// Fake worker behaviours.
const (
	modeOK             = "ok"
	mode500            = "500"
	modeHangHeaders    = "hang-headers"     // never answers
	modeHeadersThenDie = "headers-then-die" // 200 + SSE headers, then the connection drops
	modeDieMidStream   = "die-mid-stream"   // two tokens, then the connection drops
	modeStallMidStream = "stall-mid-stream" // two tokens, then silence until the request is cancelled
	modeSlow           = "slow"             // answers after fakeSlowDelay, as a long non-streaming generation does
	mode400            = "400"              // rejects the request with 400
)

// fakeSlowDelay is how long a modeSlow worker takes to answer.
const fakeSlowDelay = 600 * time.Millisecond

// What a fake decode worker reports pulling for a remote prefill.
const (
	fakePulledBytes = 2097152
	fakePullMS      = "12.500"
)

// fakeWorker is an OpenAI-compatible worker over real HTTP that streams SSE
// the way vLLM does, and can be told to fail in the ways the frontend must
// survive.
type fakeWorker struct {
	t      testing.TB
	id     string
	srv    *httptest.Server
	tokens int // completion tokens per request
	cached int // cached_tokens reported in usage

	mu       sync.Mutex
	mode     string
	bodies   [][]byte
	reqIDs   []string
	resets   int
	canceled chan struct{} // closed when a stalled request's context ends
	// gate, when set, holds each request until it is closed, and fails
	// it with a 500 if that takes 10 s.
	gate chan struct{}
}

func newFakeWorker(t testing.TB, id string) *fakeWorker {
	t.Helper()
	fw := &fakeWorker{t: t, id: id, tokens: 5, cached: 32, mode: modeOK, canceled: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { fw.serve(w, r, true) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { fw.serve(w, r, false) })
	mux.HandleFunc("POST /reset_prefix_cache", func(w http.ResponseWriter, r *http.Request) {
		fw.mu.Lock()
		fw.resets++
		fw.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	fw.srv = httptest.NewServer(mux)
	t.Cleanup(fw.srv.Close)
	return fw
}

func (fw *fakeWorker) setMode(m string) {
	fw.mu.Lock()
	fw.mode = m
	fw.mu.Unlock()
}

func (fw *fakeWorker) received() [][]byte {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return slices.Clone(fw.bodies)
}

func (fw *fakeWorker) worker(role string) Worker {
	return Worker{ID: fw.id, Role: role, Model: testModel, URL: fw.srv.URL, MaxModelLen: 4096}
}

func (fw *fakeWorker) serve(w http.ResponseWriter, r *http.Request, chat bool) {
	body, _ := io.ReadAll(r.Body)
	fw.mu.Lock()
	fw.bodies = append(fw.bodies, body)
	fw.reqIDs = append(fw.reqIDs, r.Header.Get("x-request-id"))
	mode, gate := fw.mode, fw.gate
	fw.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-time.After(10 * time.Second):
			openai.WriteError(w, http.StatusInternalServerError, openai.TypeServer, "", "fake worker: the gate never opened")
			return
		}
	}

	var req openai.CompletionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "", "fake worker: "+err.Error())
		return
	}
	switch mode {
	case mode500:
		openai.WriteError(w, http.StatusInternalServerError, openai.TypeServer, "", "fake worker: boom")
		return
	case mode400:
		openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "prompt", "fake worker: prompt too long")
		return
	case modeSlow:
		select {
		case <-time.After(fakeSlowDelay):
		case <-r.Context().Done():
			return
		}
	case modeHangHeaders:
		<-r.Context().Done()
		return
	case modeHeadersThenDie:
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	usage := &openai.Usage{PromptTokens: 100, CompletionTokens: fw.tokens, TotalTokens: 100 + fw.tokens,
		PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: fw.cached}}
	if req.KVTransferParams != nil && req.KVTransferParams["do_remote_decode"] == true {
		openai.WriteJSON(w, openai.CompletionResponse{ID: "p", Object: "text_completion", Model: req.Model,
			Choices: []openai.CompletionChoice{{Text: "x", FinishReason: openai.StringPtr(openai.FinishLength)}},
			Usage:   usage,
			KVTransferParams: map[string]any{"do_remote_prefill": true, "do_remote_decode": false,
				"remote_engine_id": fw.id, "remote_block_ids": []int{7, 8, 9}, "remote_host": "10.0.0.1"}})
		return
	}
	if req.KVTransferParams != nil && req.KVTransferParams["do_remote_prefill"] == true {
		w.Header().Set(workerHeaderPulledBytes, fmt.Sprint(fakePulledBytes))
		w.Header().Set(workerHeaderPullMS, fakePullMS)
	}
	if !req.Stream {
		if chat {
			openai.WriteJSON(w, openai.ChatResponse{ID: "c", Object: "chat.completion", Model: req.Model,
				Choices: []openai.ChatChoice{{Message: openai.Message{Role: "assistant", Content: strings.Repeat("tok ", fw.tokens)},
					FinishReason: openai.StringPtr(openai.FinishStop)}}, Usage: usage})
		} else {
			openai.WriteJSON(w, openai.CompletionResponse{ID: "c", Object: "text_completion", Model: req.Model,
				Choices: []openai.CompletionChoice{{Text: strings.Repeat("tok ", fw.tokens), FinishReason: openai.StringPtr(openai.FinishStop)}},
				Usage:   usage})
		}
		return
	}
	sse := openai.NewSSEWriter(w)
	w.WriteHeader(http.StatusOK)
	for _, ev := range streamEvents(chat, fw.tokens, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, usage) {
		if len(ev) > 0 && (mode == modeDieMidStream || mode == modeStallMidStream) && bytes.Contains(ev, []byte("tok2")) {
			if mode == modeDieMidStream {
				panic(http.ErrAbortHandler)
			}
			<-r.Context().Done()
			close(fw.canceled)
			return
		}
		if err := sse.Raw(ev); err != nil {
			return
		}
	}
	_ = sse.Done()
}

// streamEvents are the payloads a vLLM-like worker streams: a role chunk,
// one chunk per token, a finish chunk and, if asked, a usage chunk.
func streamEvents(chat bool, n int, includeUsage bool, usage *openai.Usage) [][]byte {
	var out [][]byte
	add := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	if chat {
		empty := ""
		add(openai.ChatChunk{ID: "c", Object: "chat.completion.chunk", Model: testModel,
			Choices: []openai.ChatChunkChoice{{Delta: openai.Delta{Role: "assistant", Content: &empty}}}})
		for i := range n {
			tok := fmt.Sprintf("tok%d ", i)
			add(openai.ChatChunk{ID: "c", Object: "chat.completion.chunk", Model: testModel,
				Choices: []openai.ChatChunkChoice{{Delta: openai.Delta{Content: &tok}}}})
		}
		add(openai.ChatChunk{ID: "c", Object: "chat.completion.chunk", Model: testModel,
			Choices: []openai.ChatChunkChoice{{Delta: openai.Delta{}, FinishReason: openai.StringPtr(openai.FinishStop)}}})
		if includeUsage {
			add(openai.ChatChunk{ID: "c", Object: "chat.completion.chunk", Model: testModel, Choices: []openai.ChatChunkChoice{}, Usage: usage})
		}
		return out
	}
	for i := range n {
		add(openai.CompletionResponse{ID: "c", Object: "text_completion", Model: testModel,
			Choices: []openai.CompletionChoice{{Text: fmt.Sprintf("tok%d ", i)}}})
	}
	add(openai.CompletionResponse{ID: "c", Object: "text_completion", Model: testModel,
		Choices: []openai.CompletionChoice{{FinishReason: openai.StringPtr(openai.FinishStop)}}})
	if includeUsage {
		add(openai.CompletionResponse{ID: "c", Object: "text_completion", Model: testModel, Choices: []openai.CompletionChoice{}, Usage: usage})
	}
	return out
}

const testModel = "qwen3-0.6b"

// anyModel as a harness's Config.Model makes it a fleet (Model "").
const anyModel = "\x00fleet"

// fakePool is a static Workers view.
type fakePool struct {
	mu      sync.Mutex
	workers []Worker
	refused []Refusal
}

func (p *fakePool) List() []Worker {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.workers)
}

func (p *fakePool) Refused() []Refusal {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.refused)
}

// fakeRouter picks the first candidate (or Prefer, if a candidate) and
// records every pick.
type fakeRouter struct {
	mu      sync.Mutex
	policy  string
	prefer  []string // preferred worker IDs in order
	overlap int
	tiers   [3]int
	approx  bool
	picks   []RouteRequest
	err     error
	after   func() // each decision's After
}

func (fr *fakeRouter) Pick(ctx context.Context, req RouteRequest) (Decision, error) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	req.Candidates = slices.Clone(req.Candidates)
	fr.picks = append(fr.picks, req)
	if fr.err != nil {
		return Decision{}, fr.err
	}
	id := req.Candidates[0]
	for _, p := range fr.prefer {
		if slices.Contains(req.Candidates, p) {
			id = p
			break
		}
	}
	return Decision{WorkerID: id, OverlapBlocks: fr.overlap, TierBlocks: fr.tiers, Policy: fr.policyLocked(), Approx: fr.approx, After: fr.after}, nil
}

func (fr *fakeRouter) policyLocked() string {
	if fr.policy == "" {
		return "kv"
	}
	return fr.policy
}

func (fr *fakeRouter) Policy() string {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	return fr.policyLocked()
}

func (fr *fakeRouter) Policies() []string {
	return []string{"kv", "round-robin", "random", "least-loaded"}
}

func (fr *fakeRouter) SetPolicy(name string) error {
	if !slices.Contains(fr.Policies(), name) {
		return errors.New("fake router: unknown policy")
	}
	fr.mu.Lock()
	fr.policy = name
	fr.mu.Unlock()
	return nil
}

func (fr *fakeRouter) recorded() []RouteRequest {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	return slices.Clone(fr.picks)
}

type fakeEvents struct {
	mu sync.Mutex
	m  map[string]EventStatus
}

func (fe *fakeEvents) EventStatus(id string) (EventStatus, bool) {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	st, ok := fe.m[id]
	return st, ok
}

func (fe *fakeEvents) set(id string, st EventStatus) {
	fe.mu.Lock()
	fe.m[id] = st
	fe.mu.Unlock()
}

type fakeIndex map[string]int

func (fi fakeIndex) Overlaps(hashes []uint64) map[string]int {
	out := map[string]int{}
	for k, v := range fi {
		out[k] = min(v, len(hashes))
	}
	return out
}

type fakeGate struct {
	mu       sync.Mutex
	decision GateDecision
	inputs   []GateInput
	observed []Observation
}

func (g *fakeGate) Decide(ctx context.Context, in GateInput) GateDecision {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inputs = append(g.inputs, in)
	return g.decision
}

func (g *fakeGate) Observe(o Observation) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.observed = append(g.observed, o)
}

type fakeInFlight struct {
	mu     sync.Mutex
	events []string
}

func (f *fakeInFlight) add(s string) {
	f.mu.Lock()
	f.events = append(f.events, s)
	f.mu.Unlock()
}
func (f *fakeInFlight) Started(w, id string, blocks, _ int) {
	f.add(fmt.Sprintf("start %s %d", w, blocks))
}
func (f *fakeInFlight) Stores(w, id string, n int) {
	f.add(fmt.Sprintf("stores %s %d", w, n))
}
func (f *fakeInFlight) FirstToken(w, id string) { f.add("first " + w) }
func (f *fakeInFlight) Finished(w, id string)   { f.add("end " + w) }
func (f *fakeInFlight) Release(w, id string)    { f.add("release " + w) }
func (f *fakeInFlight) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

// harness is a frontend over fakes, served on a real listener.
type harness struct {
	s      *Server
	srv    *httptest.Server
	pool   *fakePool
	router *fakeRouter
	reg    *prometheus.Registry
}

func newHarness(t testing.TB, cfg Config, deps Deps, workers ...Worker) *harness {
	t.Helper()
	h := &harness{pool: &fakePool{workers: workers}, router: &fakeRouter{}, reg: prometheus.NewRegistry()}
	switch cfg.Model {
	case "":
		cfg.Model = testModel
	case anyModel:
		cfg.Model = "" // a fleet
	}
	cfg.Registry = h.reg
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if deps.Workers == nil {
		deps.Workers = h.pool
	}
	if deps.Router == nil {
		deps.Router = h.router
	}
	s, err := New(cfg, deps)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.s = s
	s.blindGrace = 0 // judge at once; agree_test.go tests the grace
	h.srv = httptest.NewServer(s.Handler())
	t.Cleanup(func() { h.srv.Close(); s.Close() })
	return h
}

// do sends a request to the frontend and returns the response with its body
// read.
func (h *harness) do(t testing.TB, method, path, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, b
}

// value reads a counter or the sample count of a histogram.
func value(t testing.TB, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Histogram != nil:
		return float64(d.Histogram.GetSampleCount())
	}
	t.Fatalf("metric %v is neither counter nor histogram", m.Desc())
	return 0
}

// sseEvents splits a relayed stream into its data payloads.
func sseEvents(t testing.TB, body []byte) []string {
	t.Helper()
	var out []string
	for _, ev := range strings.Split(string(body), "\n\n") {
		ev = strings.TrimSpace(ev)
		if ev == "" {
			continue
		}
		p, ok := strings.CutPrefix(ev, "data: ")
		if !ok {
			t.Fatalf("event %q is not a data event", ev)
		}
		out = append(out, p)
	}
	return out
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
