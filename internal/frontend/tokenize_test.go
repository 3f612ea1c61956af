package frontend

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// TestTokenizeEndpoint: POST /tokenize answers with the frontend's own
// tokenizer (here a model's tokenizer.json with Qwen3's template), in
// vLLM's shape, and chat requests are routed by the same ids.
func TestTokenizeEndpoint(t *testing.T) {
	m, err := tokenizer.Open("../tokenizer/testdata/tiny-qwen3")
	if err != nil {
		t.Fatal(err)
	}
	a := newFakeWorker(t, "a")
	h := newHarness(t, Config{APIKey: "k"}, Deps{Tokenizer: m}, a.worker(RoleAggregated))
	want, _ := m.EncodeChat([]openai.Message{{Role: "user", Content: "hello world"}}, tokenizer.DefaultChat)

	resp, body := h.do(t, "POST", "/tokenize", `{"messages":[{"role":"user","content":"hello world"}]}`, "Authorization", "Bearer k")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var got openai.TokenizeResponse
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Count != len(want) || !reflect.DeepEqual(got.Tokens, want) {
		t.Errorf("tokens %v, want %v", got.Tokens, want)
	}
	if resp, _ := h.do(t, "POST", "/tokenize", `{"prompt":"x"}`); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the API key: %d", resp.StatusCode)
	}
	if resp, body := h.do(t, "POST", "/tokenize", `{}`, "Authorization", "Bearer k"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("empty body: %d %s", resp.StatusCode, body)
	}
	resp, body = h.do(t, "POST", "/tokenize", `{"prompt":"hello","return_token_strs":true}`, "Authorization", "Bearer k")
	if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode, string(body))
	}
	if !reflect.DeepEqual(got.TokenStrs, []string{"<|end|>", "hello"}) {
		t.Errorf("token_strs %q", got.TokenStrs)
	}
}

// TestChatTemplateSwitchesRoute: a chat is hashed with the template
// switches the engine will render (here Qwen3's enable_thinking=false,
// which adds an empty think block), so the frontend's prompt is the
// engine's.
func TestChatTemplateSwitchesRoute(t *testing.T) {
	m, err := tokenizer.Open("../tokenizer/testdata/tiny-qwen3")
	if err != nil {
		t.Fatal(err)
	}
	a := newFakeWorker(t, "a")
	h := newHarness(t, Config{}, Deps{Tokenizer: m}, a.worker(RoleAggregated))
	msgs := []openai.Message{{Role: "user", Content: "hello world"}}
	off := false
	plain, _ := m.EncodeChat(msgs, tokenizer.DefaultChat)
	noThink, _ := m.EncodeChat(msgs, tokenizer.ChatOptions{AddGenerationPrompt: true, EnableThinking: &off})
	for _, body := range []string{
		`{"model":"` + testModel + `","messages":[{"role":"user","content":"hello world"}],"max_tokens":2}`,
		`{"model":"` + testModel + `","messages":[{"role":"user","content":"hello world"}],"max_tokens":2,"chat_template_kwargs":{"enable_thinking":false}}`,
	} {
		if resp, b := h.do(t, "POST", "/v1/chat/completions", body); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	h.router.mu.Lock()
	defer h.router.mu.Unlock()
	if len(h.router.picks) != 2 || h.router.picks[0].PromptTokens != len(plain) || h.router.picks[1].PromptTokens != len(noThink) || len(noThink) <= len(plain) {
		t.Errorf("routed prompt tokens %v, want %d then %d", h.router.picks, len(plain), len(noThink))
	}
}

// TestTokenizerCacheMetrics: a long chat turn sent three times is encoded
// twice (the second time stores it) and then found in the section cache,
// and the frontend's metrics say so.
func TestTokenizerCacheMetrics(t *testing.T) {
	m, err := tokenizer.Open("../tokenizer/testdata/tiny-qwen3")
	if err != nil {
		t.Fatal(err)
	}
	a := newFakeWorker(t, "a")
	h := newHarness(t, Config{}, Deps{Tokenizer: m}, a.worker(RoleAggregated))
	body := `{"model":"` + testModel + `","messages":[{"role":"user","content":"` + strings.Repeat("hello world ", 40) + `"}],"max_tokens":2}`
	for range 3 {
		if resp, b := h.do(t, "POST", "/v1/chat/completions", body); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	got := map[string]float64{}
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			got[mf.GetName()] = mt.GetCounter().GetValue() + mt.GetGauge().GetValue()
		}
	}
	if got["switchyard_tokenizer_cache_hits_total"] != 1 || got["switchyard_tokenizer_cache_misses_total"] != 2 || got["switchyard_tokenizer_cache_bytes"] <= 0 {
		t.Errorf("cache metrics %v: want 1 hit, 2 misses, some bytes", got)
	}
}
