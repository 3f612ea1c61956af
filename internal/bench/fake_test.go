package bench

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/openai"
)

// fakeFrontend is an in-process stand-in for the Switchyard frontend: two
// workers with real prefix caches (chained block hashes), the kv and
// round-robin policies, the admin API and the response headers of the
// contract, plus fault injection by request number.
type fakeFrontend struct {
	adminKey string
	noAdmin  bool
	reject   func(n int64) int  // HTTP status to refuse the n-th completion with; 0 serves it
	midErr   func(n int64) bool // fail the n-th completion after its first chunk
	remoteAt int                // prompts of at least this many tokens prefill "remotely"; 0 never

	n      atomic.Int64
	resets atomic.Int64

	mu     sync.Mutex // guards policy, mode, rr, caches
	policy string
	mode   string // disaggregation mode: never, always or auto (remoteAt decides)
	rr     int
	caches [2]map[kvindex.BlockHash]bool
}

const fakeModel = "fake-model"

// fakeKVBytesPerToken is what the fake's workers report in /health: the
// pulled bytes of a remote prefill convert to tokens with it.
const fakeKVBytesPerToken = 1024

func startFake(t testing.TB, f *fakeFrontend) *httptest.Server {
	t.Helper()
	f.policy, f.mode = "kv", "auto"
	for i := range f.caches {
		f.caches[i] = map[kvindex.BlockHash]bool{}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		openai.WriteJSON(w, map[string]any{"status": "ok", "block_size": 16, "workers": []map[string]any{
			{"id": "w0", "role": "both", "kv_bytes_per_token": fakeKVBytesPerToken, "events": map[string]string{"state": "healthy"}},
			{"id": "w1", "role": "both", "kv_bytes_per_token": fakeKVBytesPerToken, "events": map[string]string{"state": "healthy"}}}})
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		openai.WriteJSON(w, openai.ModelList{Object: "list", Data: []openai.Model{{ID: fakeModel, Object: "model"}}})
	})
	if !f.noAdmin {
		mux.HandleFunc("/admin/router", f.router)
		mux.HandleFunc("/admin/disagg", f.disagg)
		mux.HandleFunc("POST /admin/reset-cache", func(w http.ResponseWriter, r *http.Request) {
			if !f.authorized(w, r) {
				return
			}
			f.mu.Lock()
			for i := range f.caches {
				clear(f.caches[i])
			}
			f.mu.Unlock()
			f.resets.Add(1)
			openai.WriteJSON(w, map[string]int{"workers": len(f.caches)})
		})
	}
	mux.HandleFunc("POST /v1/completions", f.complete)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func (f *fakeFrontend) authorized(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Authorization") != "Bearer "+f.adminKey {
		openai.WriteError(w, http.StatusUnauthorized, openai.TypeAuthentication, "", "bad admin key")
		return false
	}
	return true
}

func (f *fakeFrontend) router(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	if r.Method == http.MethodPut {
		var body struct{ Policy string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || (body.Policy != "kv" && body.Policy != "round-robin") {
			openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "policy", "unknown policy")
			return
		}
		f.mu.Lock()
		f.policy = body.Policy
		f.mu.Unlock()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	openai.WriteJSON(w, RouterState{Policy: f.policy, Policies: []string{"kv", "round-robin"}})
}

func (f *fakeFrontend) disagg(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Method == http.MethodPut {
		var body struct{ Mode string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || (body.Mode != "never" && body.Mode != "always" && body.Mode != "auto") {
			openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "mode", "unknown mode")
			return
		}
		f.mode = body.Mode
	}
	openai.WriteJSON(w, map[string]any{"mode": f.mode, "margin": 0.1})
}

func (f *fakeFrontend) complete(w http.ResponseWriter, r *http.Request) {
	var req openai.CompletionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "", err.Error())
		return
	}
	// The contract bench must keep: token-ID prompts, streamed, usage on,
	// exact lengths.
	if req.Model != fakeModel || req.Prompt == nil || !req.Prompt.IsTokens || !req.Stream || req.StreamOptions == nil ||
		!req.StreamOptions.IncludeUsage || !req.IgnoreEOS || req.MaxTokens == nil || *req.MaxTokens < 1 {
		openai.WriteError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "", "request breaks the bench contract")
		return
	}
	n := f.n.Add(1)
	if f.reject != nil {
		if st := f.reject(n); st != 0 {
			openai.WriteError(w, st, openai.TypeRateLimit, "", "shed")
			return
		}
	}
	toks := req.Prompt.Tokens
	hashes := kvindex.HashChain(nil, "", toks, 16)
	f.mu.Lock()
	overlap := [2]int{}
	for i := range f.caches {
		for _, h := range hashes {
			if !f.caches[i][h] {
				break
			}
			overlap[i]++
		}
	}
	worker := 0
	if f.policy == "round-robin" {
		worker = f.rr % 2
		f.rr++
	} else if overlap[1] > overlap[0] {
		worker = 1
	}
	for _, h := range hashes {
		f.caches[worker][h] = true
	}
	policy, mode := f.policy, f.mode
	f.mu.Unlock()

	h := w.Header()
	h.Set(HeaderWorker, "w"+strconv.Itoa(worker))
	h.Set(HeaderOverlapTokens, strconv.Itoa(overlap[worker]*16))
	h.Set(HeaderPolicy, policy)
	cached := overlap[worker] * 16
	if f.remoteAt > 0 {
		if mode == "always" || (mode == "auto" && len(toks) >= f.remoteAt) {
			// The decode worker pulls the blocks it lacks and then, as vLLM
			// and the simulated engine do, reports them as cached.
			pulled := (len(hashes) - overlap[worker]) * 16
			cached += pulled
			h.Set(HeaderPrefill, "remote")
			h.Set(HeaderDisaggReason, "link_faster")
			h.Set(HeaderKVBytes, strconv.Itoa(pulled*fakeKVBytesPerToken))
		} else if mode != "never" {
			h.Set(HeaderPrefill, "local")
			h.Set(HeaderDisaggReason, "short_prompt")
			h.Set(HeaderKVBytes, "0")
		}
		h.Set(HeaderPredictedTTFT, strconv.FormatFloat(float64(len(toks))/10, 'f', 1, 64))
	}
	sse := openai.NewSSEWriter(w)
	chunk := func(text string) {
		_ = sse.Event(openai.CompletionResponse{ID: "c", Object: "text_completion", Model: fakeModel,
			Choices: []openai.CompletionChoice{{Text: text}}})
	}
	chunk("") // an empty first chunk must not count as the first token
	for i := range *req.MaxTokens {
		chunk(" t")
		if i == 0 && f.midErr != nil && f.midErr(n) {
			_ = sse.Error(http.StatusInternalServerError, openai.TypeServer, "engine died")
			return
		}
	}
	_ = sse.Event(openai.CompletionResponse{ID: "c", Object: "text_completion", Model: fakeModel, Choices: []openai.CompletionChoice{},
		Usage: &openai.Usage{PromptTokens: len(toks), CompletionTokens: *req.MaxTokens, TotalTokens: len(toks) + *req.MaxTokens,
			PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: cached}}})
	_ = sse.Done()
}

func routingConfig(url string) Config {
	cfg := DefaultConfig()
	cfg.Scenario, cfg.URL = ScenarioRouting, url
	cfg.Requests, cfg.Prefixes, cfg.PrefixTokens, cfg.SuffixTokens, cfg.MaxTokens = 24, 3, 100, 8, 4
	cfg.Concurrency = 1
	return cfg
}

func mustValidate(t testing.TB, cfg Config) Config {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
