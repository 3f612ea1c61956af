// Package preflighttest is a fake Switchyard frontend for testing preflight:
// an httptest server that implements the frontend's health, admin, pin and
// streaming-completion contract over simulated workers with real prefix
// caches (kvindex block hashes), a KV index fed only by workers whose events
// are on, a kv or round-robin router, link probes and the disaggregation
// gate's prediction formula. Prefill takes real wall time (a sleep per
// uncached token) so client-side TTFT separates cold from warm.
//
// It is safe for concurrent use. It is a test kit, not a frontend: no
// scheduling, no queues, no real transfers.
package preflighttest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/openai"
)

// Worker is one simulated worker.
type Worker struct {
	ID              string
	Role            string // aggregated, prefill or decode
	Model           string // "" = the frontend's model
	BlockSize       int    // 0 = the frontend's block size
	KVBytesPerToken int64  // 0 = 114,688 (qwen3-0.6b bf16)
	MaxModelLen     int    // reported in /health when set
	// Events is the worker's event state: "healthy" (default), "disabled"
	// or "silent". Only healthy workers feed the index.
	Events string
	// GapPerRequest adds this many sequence gaps per request it serves.
	GapPerRequest uint64
	// EventDelay is how long after a request its blocks appear in the index.
	EventDelay time.Duration
	// NoCache makes the worker recompute every prompt (cached_tokens 0)
	// while still reporting stored blocks, like an engine with prefix
	// caching switched off but events on.
	NoCache bool
	// NoCachedTokens leaves prompt_tokens_details out of the worker's
	// usage, as vLLM does without --enable-prompt-tokens-details.
	NoCachedTokens bool
	// HostTier makes the worker report every cached token as loaded from
	// host memory (usage.prompt_tokens_details.switchyard_kv_tiers), as an
	// engine whose GPU evicted the prefix to its CPU tier would.
	HostTier bool
	// PrefillA and PrefillB model prefill time for the predict endpoint:
	// A·n + B·n² seconds for n uncached tokens.
	PrefillA, PrefillB float64
	// Tokenizer is how the worker's POST /tokenize answers: "" the same
	// ids as the frontend, "differs" one id changed at position 5,
	// "missing" 404. A worker whose tokenizer differs also caches the
	// chats it serves (and reports them in its events) under its own ids,
	// so the index never predicts its cache hits.
	Tokenizer string
}

// Link is a prefill→decode link.
type Link struct {
	From, To    string
	BytesPerSec float64
	RTTMs       float64
	Emulated    string
}

// Config shapes the fake.
type Config struct {
	Model     string        // default qwen3-0.6b
	BlockSize int           // default 16
	Policy    string        // kv (default) or round-robin
	Disagg    string        // never, auto (default) or always
	Margin    float64       // gate margin, default 0.1
	AdminKey  string        // "" = admin open
	PerToken  time.Duration // simulated prefill wall time per uncached token, default 200µs
	Workers   []Worker
	Refused   [][2]string // id, reason
	Links     []Link
}

// Frontend is a running fake.
type Frontend struct {
	URL string

	cfg Config
	mu  sync.Mutex // guards everything below
	ws  map[string]*worker
	// index maps a block hash to the workers whose events reported it, and
	// when the report becomes visible.
	index map[uint64]map[string]time.Time
	rr    int
	pins  int
	// maxPredicted is the longest prompt POST /admin/disagg/predict was
	// asked about.
	maxPredicted int
}

// MaxPredicted returns the longest prompt length the predict endpoint was
// asked about.
func (f *Frontend) MaxPredicted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxPredicted
}

type worker struct {
	Worker
	cache map[uint64]bool
	seq   uint64
	gaps  uint64
}

// New starts a fake frontend; it is closed when the test ends.
func New(tb testing.TB, cfg Config) *Frontend {
	tb.Helper()
	if cfg.Model == "" {
		cfg.Model = "qwen3-0.6b"
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 16
	}
	if cfg.Policy == "" {
		cfg.Policy = "kv"
	}
	if cfg.Disagg == "" {
		cfg.Disagg = "auto"
	}
	if cfg.Margin == 0 {
		cfg.Margin = 0.1
	}
	if cfg.PerToken == 0 {
		cfg.PerToken = 200 * time.Microsecond
	}
	f := &Frontend{cfg: cfg, ws: map[string]*worker{}, index: map[uint64]map[string]time.Time{}}
	for _, w := range cfg.Workers {
		if w.Role == "" {
			w.Role = "aggregated"
		}
		if w.Model == "" {
			w.Model = cfg.Model
		}
		if w.BlockSize == 0 {
			w.BlockSize = cfg.BlockSize
		}
		if w.KVBytesPerToken == 0 {
			w.KVBytesPerToken = 114688
		}
		if w.Events == "" {
			w.Events = "healthy"
		}
		f.ws[w.ID] = &worker{Worker: w, cache: map[uint64]bool{}}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", f.health)
	mux.HandleFunc("GET /admin/events", f.admin(f.events))
	mux.HandleFunc("POST /admin/lookup", f.admin(f.lookup))
	mux.HandleFunc("GET /admin/links", f.admin(f.links))
	mux.HandleFunc("POST /admin/links/probe", f.admin(f.probe))
	mux.HandleFunc("GET /admin/disagg", f.admin(f.disagg))
	mux.HandleFunc("POST /admin/disagg/predict", f.admin(f.predict))
	mux.HandleFunc("POST /v1/completions", f.complete)
	mux.HandleFunc("POST /v1/chat/completions", f.chat)
	mux.HandleFunc("POST /tokenize", f.tokenize(""))
	mux.HandleFunc("POST /w/{id}/tokenize", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		x, ok := f.ws[r.PathValue("id")]
		f.mu.Unlock()
		if !ok || x.Tokenizer == "missing" {
			openai.WriteError(w, http.StatusNotFound, openai.TypeNotFound, "", "not found")
			return
		}
		f.tokenize(x.Tokenizer)(w, r)
	})
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// Pinned reports how many pinned requests the fake served.
func (f *Frontend) Pinned() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pins
}

func (f *Frontend) order() []*worker {
	out := make([]*worker, 0, len(f.cfg.Workers))
	for _, w := range f.cfg.Workers {
		out = append(out, f.ws[w.ID])
	}
	return out
}

func (f *Frontend) authorized(r *http.Request) bool {
	return f.cfg.AdminKey == "" || r.Header.Get("Authorization") == "Bearer "+f.cfg.AdminKey
}

func (f *Frontend) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !f.authorized(r) {
			openai.WriteError(w, http.StatusUnauthorized, openai.TypeAuthentication, "", "admin key required")
			return
		}
		h(w, r)
	}
}

func (f *Frontend) health(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	type ev struct {
		State string `json:"state"`
		Cause string `json:"cause"`
	}
	type wk struct {
		ID        string `json:"id"`
		Role      string `json:"role"`
		Model     string `json:"model"`
		BlockSize int    `json:"block_size"`
		KVBytes   int64  `json:"kv_bytes_per_token"`
		MaxLen    int    `json:"max_model_len,omitempty"`
		URL       string `json:"url"`
		Events    ev     `json:"events"`
	}
	status, reasons := "ok", []string{}
	ws := []wk{}
	for _, x := range f.order() {
		ws = append(ws, wk{ID: x.ID, Role: x.Role, Model: x.Model, BlockSize: x.BlockSize, KVBytes: x.KVBytesPerToken, MaxLen: x.MaxModelLen,
			URL: f.URL + "/w/" + x.ID, Events: ev{State: x.Events, Cause: cause(x.Events)}})
		if x.Events != "healthy" {
			status = "degraded"
			reasons = append(reasons, x.ID+" events "+x.Events)
		}
	}
	refused := []map[string]string{}
	for _, r := range f.cfg.Refused {
		refused = append(refused, map[string]string{"id": r[0], "reason": r[1]})
	}
	openai.WriteJSON(w, map[string]any{"status": status, "reason": strings.Join(reasons, "; "), "model": f.cfg.Model,
		"block_size": f.cfg.BlockSize, "policy": f.cfg.Policy, "disagg": f.cfg.Disagg, "workers": ws, "refused": refused})
}

func cause(state string) string {
	switch state {
	case "disabled":
		return "worker started with --kv-events=false"
	case "silent":
		return "no event or heartbeat for 5s"
	}
	return ""
}

func (f *Frontend) events(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]any{}
	for _, x := range f.order() {
		age := 120.0
		if x.Events == "silent" {
			age = 5000
		}
		out[x.ID] = map[string]any{"state": x.Events, "cause": cause(x.Events), "epoch": 7, "last_seq": x.seq,
			"last_event_age_ms": age, "batches": x.seq, "blocks": len(x.cache), "gaps": x.gaps, "resyncs": 0, "malformed": 0}
	}
	openai.WriteJSON(w, map[string]any{"workers": out})
}

func (f *Frontend) lookup(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Prompt    openai.Prompt    `json:"prompt"`
		Messages  []openai.Message `json:"messages"`
		CacheSalt string           `json:"cache_salt"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || !in.Prompt.IsTokens && len(in.Messages) == 0 {
		openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "prompt", "fake: lookup wants token ids or messages")
		return
	}
	toks := in.Prompt.Tokens
	if len(in.Messages) > 0 {
		toks = chatTokens(in.Messages, "")
	}
	hashes := kvindex.HashChain(nil, in.CacheSalt, toks, f.cfg.BlockSize)
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	ov := map[string]int{}
	for _, x := range f.order() {
		n := 0
		for _, h := range hashes {
			at, ok := f.index[h][x.ID]
			if !ok || at.After(now) {
				break
			}
			n++
		}
		ov[x.ID] = n
	}
	openai.WriteJSON(w, map[string]any{"blocks": len(hashes), "block_size": f.cfg.BlockSize, "overlaps": ov})
}

// leading counts the leading hashes present in set.
func leading(hashes []uint64, set map[uint64]bool) int {
	n := 0
	for _, h := range hashes {
		if !set[h] {
			break
		}
		n++
	}
	return n
}

func (f *Frontend) complete(w http.ResponseWriter, r *http.Request) {
	var req openai.CompletionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Prompt == nil || !req.Prompt.IsTokens {
		openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "prompt", "fake: want token ids")
		return
	}
	if !req.Stream || req.StreamOptions == nil || !req.StreamOptions.IncludeUsage || !req.IgnoreEOS {
		openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "stream", "fake: preflight must stream with usage and ignore_eos")
		return
	}
	f.serve(w, r, &req, req.Prompt.Tokens, req.Prompt.Tokens)
}

// chatTokens is the stand-in tokenization of a chat: the ids POST
// /tokenize gives for it, as the frontend (mode "") or a worker with that
// Tokenizer mode would.
func chatTokens(msgs []openai.Message, mode string) []uint32 {
	text := ""
	for _, m := range msgs {
		text += m.Role + ": " + m.Content + "\n"
	}
	toks := make([]uint32, len(text))
	for i := range len(text) {
		toks[i] = uint32(text[i])
		if mode == "differs" && i == 5 {
			toks[i] += 1000
		}
	}
	return toks
}

// chat serves a streamed chat: the frontend hashes the chat as its
// tokenizer renders it, the worker caches (and reports in its events) the
// chat as its own tokenizer does; a worker whose Tokenizer differs is
// never matched by the index.
func (f *Frontend) chat(w http.ResponseWriter, r *http.Request) {
	var req openai.CompletionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "messages", "fake: want messages")
		return
	}
	if !req.Stream || req.StreamOptions == nil || !req.StreamOptions.IncludeUsage || !req.IgnoreEOS {
		openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "stream", "fake: preflight must stream with usage and ignore_eos")
		return
	}
	mode := ""
	f.mu.Lock()
	if x, ok := f.ws[r.Header.Get("x-switchyard-pin-worker")]; ok {
		mode = x.Tokenizer
	}
	f.mu.Unlock()
	f.serve(w, r, &req, chatTokens(req.Messages, ""), chatTokens(req.Messages, mode))
}

// serve routes and answers one request whose prompt the frontend
// tokenized as toks and the chosen worker as wtoks.
func (f *Frontend) serve(w http.ResponseWriter, r *http.Request, req *openai.CompletionRequest, toks, wtoks []uint32) {
	hashes := kvindex.HashChain(nil, req.CacheSalt, toks, f.cfg.BlockSize)
	whashes := kvindex.HashChain(nil, req.CacheSalt, wtoks, f.cfg.BlockSize)
	pin := r.Header.Get("x-switchyard-pin-worker")
	f.mu.Lock()
	var x *worker
	policy := f.cfg.Policy
	switch {
	case pin != "":
		if !f.authorized(r) {
			f.mu.Unlock()
			openai.WriteError(w, http.StatusForbidden, openai.TypeAuthentication, "x-switchyard-pin-worker", "pin needs admin access")
			return
		}
		x, policy = f.ws[pin], "pinned"
		f.pins++
	default:
		x = f.route(hashes)
	}
	if x == nil {
		f.mu.Unlock()
		openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "x-switchyard-pin-worker", "no such worker")
		return
	}
	// An engine always computes the last prompt token.
	cached := min(leading(whashes, x.cache)*f.cfg.BlockSize, (len(wtoks)-1)/f.cfg.BlockSize*f.cfg.BlockSize)
	cached = max(cached, 0)
	if x.NoCache {
		cached = 0
	}
	overlap := leading(hashes, indexSet(f.index, x.ID)) * f.cfg.BlockSize
	f.mu.Unlock()

	time.Sleep(time.Duration(len(wtoks)-cached) * f.cfg.PerToken) // simulated prefill

	f.mu.Lock()
	visible := time.Now().Add(x.EventDelay)
	for _, h := range whashes { // the engine's events carry its own tokens
		x.cache[h] = true
		if x.Events == "healthy" {
			if f.index[h] == nil {
				f.index[h] = map[string]time.Time{}
			}
			if _, ok := f.index[h][x.ID]; !ok {
				f.index[h][x.ID] = visible
			}
		}
	}
	x.seq++
	x.gaps += x.GapPerRequest
	f.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("x-switchyard-worker", x.ID)
	w.Header().Set("x-switchyard-policy", policy)
	w.Header().Set("x-switchyard-overlap-tokens", fmt.Sprint(overlap))
	sw := openai.NewSSEWriter(w)
	n := 2
	if req.MaxTokens != nil {
		n = *req.MaxTokens
	}
	for range n {
		_ = sw.Event(map[string]any{"object": "text_completion", "model": f.cfg.Model,
			"choices": []map[string]any{{"index": 0, "text": " tok", "finish_reason": nil}}, "usage": nil})
	}
	details := &openai.PromptTokensDetails{CachedTokens: cached}
	if x.HostTier {
		kvb := x.KVBytesPerToken
		if kvb == 0 {
			kvb = 114688
		}
		details.KVTiers = &openai.KVTiers{CPUTokens: cached, CPULoadedBytes: int64(cached) * kvb}
	}
	if x.NoCachedTokens && r.URL.Path == "/v1/chat/completions" {
		details = nil // token-id probes keep theirs: the other checks need them
	}
	_ = sw.Event(map[string]any{"object": "text_completion", "model": f.cfg.Model, "choices": []any{},
		"usage": openai.Usage{PromptTokens: len(wtoks), CompletionTokens: n, TotalTokens: len(wtoks) + n,
			PromptTokensDetails: details}})
	_ = sw.Done()
}

func indexSet(index map[uint64]map[string]time.Time, id string) map[uint64]bool {
	out := map[uint64]bool{}
	for h, ws := range index {
		if _, ok := ws[id]; ok {
			out[h] = true
		}
	}
	return out
}

// route picks a serving worker: the longest indexed prefix (kv), or the
// next in turn (round-robin). Prefill workers never serve clients.
func (f *Frontend) route(hashes []uint64) *worker {
	var serving []*worker
	for _, x := range f.order() {
		if x.Role != "prefill" {
			serving = append(serving, x)
		}
	}
	if len(serving) == 0 {
		return nil
	}
	if f.cfg.Policy == "round-robin" {
		f.rr++
		return serving[(f.rr-1)%len(serving)]
	}
	best, bestN := serving[0], -1
	for _, x := range serving {
		if n := leading(hashes, indexSet(f.index, x.ID)); n > bestN {
			best, bestN = x, n
		}
	}
	return best
}

func (f *Frontend) link(from, to string) (Link, bool) {
	for _, l := range f.cfg.Links {
		if l.From == from && l.To == to {
			return l, true
		}
	}
	return Link{}, false
}

func (f *Frontend) links(w http.ResponseWriter, _ *http.Request) {
	out := []map[string]any{}
	for _, l := range f.cfg.Links {
		out = append(out, map[string]any{"from": l.From, "to": l.To, "bytes_per_sec": l.BytesPerSec, "rtt_ms": l.RTTMs,
			"measured": true, "samples": 3, "emulated": l.Emulated})
	}
	openai.WriteJSON(w, map[string]any{"links": out})
}

func (f *Frontend) probe(w http.ResponseWriter, r *http.Request) {
	var in struct {
		From, To string
		Bytes    int64
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "", err.Error())
		return
	}
	l, ok := f.link(in.From, in.To)
	if !ok {
		openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "from", "fake: no such link")
		return
	}
	openai.WriteJSON(w, map[string]any{"from": l.From, "to": l.To, "bytes": in.Bytes, "seconds": float64(in.Bytes) / l.BytesPerSec,
		"bytes_per_sec": l.BytesPerSec, "rtt_ms": l.RTTMs, "emulated": l.Emulated})
}

func (f *Frontend) disagg(w http.ResponseWriter, _ *http.Request) {
	openai.WriteJSON(w, map[string]any{"mode": f.cfg.Disagg, "margin": f.cfg.Margin, "ttft_slo_ms": 2000, "itl_slo_ms": 100})
}

// Predict is the gate's formula at zero queue and nothing cached, as the fake
// computes it: local = prefill_D(n); remote = prefill_P(n) + n·kv/B + rtt.
func Predict(p, d Worker, l Link, n int) (kvBytes int64, transfer, local, remote float64) {
	kvBytes = int64(n) * d.KVBytesPerToken
	transfer = float64(kvBytes) / l.BytesPerSec
	fn := float64(n)
	local = d.PrefillA*fn + d.PrefillB*fn*fn
	remote = p.PrefillA*fn + p.PrefillB*fn*fn + transfer + l.RTTMs/1000
	return kvBytes, transfer, local, remote
}

func (f *Frontend) predict(w http.ResponseWriter, r *http.Request) {
	var in struct {
		PromptTokens []int  `json:"prompt_tokens"`
		Prefill      string `json:"prefill"`
		Decode       string `json:"decode"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "", err.Error())
		return
	}
	p, d := f.ws[in.Prefill], f.ws[in.Decode]
	l, ok := f.link(in.Prefill, in.Decode)
	if p == nil || d == nil || !ok {
		openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "prefill", "fake: unknown pair")
		return
	}
	preds := []map[string]any{}
	f.mu.Lock()
	for _, n := range in.PromptTokens {
		f.maxPredicted = max(f.maxPredicted, n)
	}
	f.mu.Unlock()
	for _, n := range in.PromptTokens {
		kv, tr, loc, rem := Predict(p.Worker, d.Worker, l, n)
		choice, reason := "local", "local_faster"
		if rem < (1-f.cfg.Margin)*loc {
			choice, reason = "remote", "remote_faster"
		}
		preds = append(preds, map[string]any{"prompt_tokens": n, "kv_bytes": kv, "transfer_s": tr,
			"local_ttft_s": loc, "remote_ttft_s": rem, "choice": choice, "reason": reason})
	}
	openai.WriteJSON(w, map[string]any{"predictions": preds, "link": map[string]any{"bytes_per_sec": l.BytesPerSec, "rtt_ms": l.RTTMs}})
}

// tokenize serves POST /tokenize with a stand-in tokenizer: one id per
// byte of the prompt, or of "role: content\n" per message; "differs"
// changes the id at position 5.
func (f *Frontend) tokenize(mode string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req openai.TokenizeRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "", err.Error())
			return
		}
		text := ""
		if req.Prompt != nil {
			text = *req.Prompt
		}
		for _, m := range req.Messages {
			text += m.Role + ": " + m.Content + "\n"
		}
		resp := openai.TokenizeResponse{Tokens: []uint32{}}
		for i := range len(text) {
			id := uint32(text[i])
			if mode == "differs" && i == 5 {
				id += 1000
			}
			resp.Tokens = append(resp.Tokens, id)
			if req.ReturnTokenStrs {
				resp.TokenStrs = append(resp.TokenStrs, text[i:i+1])
			}
		}
		resp.Count = len(resp.Tokens)
		openai.WriteJSON(w, resp)
	}
}
