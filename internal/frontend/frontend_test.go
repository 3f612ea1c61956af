package frontend

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

const chatStreamBody = `{"model":"qwen3-0.6b","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say something about switchyards and trains, at some length please."}],"stream":true,"stream_options":{"include_usage":true},"cache_salt":"tenant-a","max_tokens":8}`

// TestOverlapTiersWhenNoOverlap: a request with nothing cached says so in
// every tier, rather than leaving the header out.
func TestOverlapTiersWhenNoOverlap(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated))
	resp, body := h.do(t, "POST", "/v1/chat/completions", chatStreamBody)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderOverlapTiers) != "gpu=0,cpu=0,disk=0" {
		t.Errorf("status %d, %s = %q, want gpu=0,cpu=0,disk=0 (%s)", resp.StatusCode, HeaderOverlapTiers, resp.Header.Get(HeaderOverlapTiers), body)
	}
}

func TestChatStreamRelaysBytesHeadersAndUsage(t *testing.T) {
	a, b := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b")
	h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated), b.worker(RoleAggregated))
	h.router.prefer = []string{"w-b"}
	h.router.overlap = 2
	h.router.tiers = [3]int{1, 1, 0}

	resp, body := h.do(t, "POST", "/v1/chat/completions", chatStreamBody)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	for k, want := range map[string]string{HeaderWorker: "w-b", HeaderOverlapTokens: "32", HeaderOverlapTiers: "gpu=16,cpu=16,disk=0",
		HeaderPolicy: "kv", "Content-Type": "text/event-stream"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	if got := resp.Header.Get(HeaderPrefill); got != "" {
		t.Errorf("aggregated path set %s = %q", HeaderPrefill, got)
	}
	checkServerTiming(t, resp)
	// The relay passes the worker's events through byte for byte.
	usage := &openai.Usage{PromptTokens: 100, CompletionTokens: 5, TotalTokens: 105, PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: 32}}
	var want bytes.Buffer
	for _, ev := range streamEvents(true, 5, true, usage) {
		want.WriteString("data: " + string(ev) + "\n\n")
	}
	want.WriteString("data: [DONE]\n\n")
	if !bytes.Equal(body, want.Bytes()) {
		t.Errorf("relayed stream differs from the worker's:\n got %q\nwant %q", body, want.Bytes())
	}
	// The worker got the client's body unchanged.
	if got := b.received(); len(got) != 1 || string(got[0]) != chatStreamBody {
		t.Errorf("worker received %q, want the original body", got)
	}
	if n := len(a.received()); n != 0 {
		t.Errorf("unpicked worker received %d requests", n)
	}
	// The router saw the block hashes of the templated, salted prompt.
	var req openai.CompletionRequest
	if err := json.Unmarshal([]byte(chatStreamBody), &req); err != nil {
		t.Fatal(err)
	}
	tok, _ := tokenizer.New()
	toks := tok.Encode(tokenizer.ChatPrompt(req.Messages))
	wantHashes := kvindex.HashChain(nil, "tenant-a", toks, 16)
	picks := h.router.recorded()
	if len(picks) != 1 {
		t.Fatalf("router picks = %d, want 1", len(picks))
	}
	if !slices.Equal(picks[0].Hashes, wantHashes) || picks[0].PromptTokens != len(toks) || len(wantHashes) == 0 {
		t.Errorf("router got %d hashes for %d tokens, want %d for %d", len(picks[0].Hashes), picks[0].PromptTokens, len(wantHashes), len(toks))
	}
	if got := value(t, h.s.m.cacheHit); got != 32 {
		t.Errorf("cache-hit tokens = %v, want 32", got)
	}
	if got := value(t, h.s.m.promptToks); got != 100 {
		t.Errorf("prompt tokens = %v, want 100", got)
	}
	if got := value(t, h.s.m.ttft); got != 1 {
		t.Errorf("ttft samples = %v, want 1", got)
	}
	if got := value(t, h.s.m.itl); got != 4 { // 5 content chunks, 4 gaps
		t.Errorf("itl samples = %v, want 4", got)
	}
	if got := value(t, h.s.m.requests.WithLabelValues("chat", "200")); got != 1 {
		t.Errorf("requests{chat,200} = %v, want 1", got)
	}
}

func TestCompletionsNonStreamingWithTokenPrompt(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{BlockSize: 4}, Deps{}, a.worker(RoleAggregated))
	body := `{"model":"qwen3-0.6b","prompt":[1,2,3,4,5,6,7,8,9],"max_tokens":3}`
	resp, got := h.do(t, "POST", "/v1/completions", body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	var cr openai.CompletionResponse
	if err := json.Unmarshal(got, &cr); err != nil {
		t.Fatalf("decode %q: %v", got, err)
	}
	if cr.Usage == nil || cr.Usage.PromptTokensDetails == nil || cr.Usage.PromptTokensDetails.CachedTokens != 32 {
		t.Errorf("usage %+v does not carry cached_tokens 32", cr.Usage)
	}
	want := kvindex.HashChain(nil, "", []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}, 4)
	if p := h.router.recorded(); len(p) != 1 || !slices.Equal(p[0].Hashes, want) || len(want) != 2 {
		t.Errorf("router hashes = %v, want %v", p, want)
	}
	if got := value(t, h.s.m.cacheHit); got != 32 {
		t.Errorf("cache-hit tokens = %v, want 32", got)
	}
	if got := resp.Header.Get(HeaderWorker); got != "w-a" {
		t.Errorf("worker header = %q", got)
	}
	checkServerTiming(t, resp)
}

func TestModels(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated))
	resp, body := h.do(t, "GET", "/v1/models", "")
	var ml openai.ModelList
	if err := json.Unmarshal(body, &ml); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d body %q: %v", resp.StatusCode, body, err)
	}
	if len(ml.Data) != 1 || ml.Data[0].ID != testModel || ml.Data[0].MaxModelLen != 4096 || ml.Object != "list" {
		t.Errorf("models = %+v", ml)
	}
}

func decodeError(t testing.TB, body []byte) openai.ErrorBody {
	t.Helper()
	var e openai.ErrorResponse
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("body %q is not an OpenAI error: %v", body, err)
	}
	return e.Error
}

func TestValidation(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{MaxBodyBytes: 1024}, Deps{}, a.worker(RoleAggregated))
	tests := []struct {
		name, path, body string
		status           int
		param            string
	}{
		{"malformed json", "/v1/completions", `{"model":`, 400, ""},
		{"trailing garbage", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x"} x`, 400, ""},
		{"wrong type stream", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x","stream":"yes"}`, 400, "stream"},
		{"wrong type max_tokens", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x","max_tokens":"5"}`, 400, "max_tokens"},
		{"wrong type prompt", "/v1/completions", `{"model":"qwen3-0.6b","prompt":{"a":1}}`, 400, "prompt"},
		{"missing model", "/v1/completions", `{"prompt":"x"}`, 400, "model"},
		{"unknown model", "/v1/completions", `{"model":"gpt-9","prompt":"x"}`, 404, "model"},
		{"missing prompt", "/v1/completions", `{"model":"qwen3-0.6b"}`, 400, "prompt"},
		{"missing messages", "/v1/chat/completions", `{"model":"qwen3-0.6b"}`, 400, "messages"},
		{"zero max_tokens", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x","max_tokens":0}`, 400, "max_tokens"},
		{"negative max_completion_tokens", "/v1/chat/completions", `{"model":"qwen3-0.6b","messages":[{"role":"user","content":"x"}],"max_completion_tokens":-1}`, 400, "max_completion_tokens"},
		{"stream_options without stream", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x","stream_options":{"include_usage":true}}`, 400, "stream_options"},
		{"temperature above 2", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x","temperature":2.5}`, 400, "temperature"},
		{"negative temperature", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x","temperature":-0.1}`, 400, "temperature"},
		{"top_p zero", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x","top_p":0}`, 400, "top_p"},
		{"top_p above 1", "/v1/chat/completions", `{"model":"qwen3-0.6b","messages":[{"role":"user","content":"x"}],"top_p":1.5}`, 400, "top_p"},
		{"client kv_transfer_params", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x","kv_transfer_params":{"do_remote_prefill":true,"remote_host":"10.0.0.1"}}`, 400, "kv_transfer_params"},
		// encoding/json takes the last of keys that match case-insensitively;
		// an engine reads the exact one, so the raw body must carry neither.
		{"kv_transfer_params hidden behind a case variant", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x","kv_transfer_params":{"do_remote_prefill":true,"remote_host":"10.0.0.1"},"KV_TRANSFER_PARAMS":null}`, 400, "kv_transfer_params"},
		{"kv_transfer_params in upper case", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x","Kv_Transfer_Params":{"do_remote_prefill":true}}`, 400, "kv_transfer_params"},
		{"kv_transfer_params null", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x","kv_transfer_params":null}`, 400, "kv_transfer_params"},
		{"kv_transfer_params escaped", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x","kv_transfer_\u0070arams":{"do_remote_prefill":true}}`, 400, "kv_transfer_params"},
		{"max_tokens twice in two cases", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x","max_tokens":5,"MAX_TOKENS":100000}`, 400, "max_tokens"},
		{"invalid utf-8 prompt", "/v1/completions", "{\"model\":\"qwen3-0.6b\",\"prompt\":\"a\xff\xfeb\"}", 400, ""},
		{"invalid utf-8 message", "/v1/chat/completions", "{\"model\":\"qwen3-0.6b\",\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\x28\"}]}", 400, ""},
		{"batched prompts", "/v1/completions", `{"model":"qwen3-0.6b","prompt":["a","b"]}`, 400, "prompt"},
		{"unknown role", "/v1/chat/completions", `{"model":"qwen3-0.6b","messages":[{"role":"bogus","content":"x"}]}`, 400, "messages"},
		{"image content part", "/v1/chat/completions", `{"model":"qwen3-0.6b","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x"}}]}]}`, 400, "messages"},
		{"body too large", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"` + strings.Repeat("x", 2000) + `"}`, 413, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := h.do(t, "POST", tc.path, tc.body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d (%s)", resp.StatusCode, tc.status, body)
			}
			e := decodeError(t, body)
			// A model never served has OpenAI's string code; the rest
			// carry the status, as vLLM's do.
			if tc.status == 404 && e.CodeName != ErrCodeModelNotFound || tc.status != 404 && e.Code != tc.status || e.Message == "" || e.Type == "" {
				t.Errorf("error = %+v", e)
			}
			gotParam := ""
			if e.Param != nil {
				gotParam = *e.Param
			}
			if gotParam != tc.param {
				t.Errorf("param = %q, want %q", gotParam, tc.param)
			}
		})
	}
	if n := len(a.received()); n != 0 {
		t.Errorf("invalid requests reached the worker %d times", n)
	}
}

func TestAPIKey(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{APIKey: "sk-test", AdminKey: "admin"}, Deps{}, a.worker(RoleAggregated))
	body := `{"model":"qwen3-0.6b","prompt":"hello"}`
	tests := []struct {
		name, method, path, auth string
		status                   int
	}{
		{"no key", "POST", "/v1/completions", "", 401},
		{"wrong key", "POST", "/v1/completions", "Bearer nope", 401},
		{"api key", "POST", "/v1/completions", "Bearer sk-test", 200},
		{"admin key works for api", "POST", "/v1/completions", "Bearer admin", 200},
		{"models need key", "GET", "/v1/models", "", 401},
		{"health open", "GET", "/health", "", 200},
		{"metrics open", "GET", "/metrics", "", 200},
		{"admin with api key", "GET", "/admin/router", "Bearer sk-test", 401},
		{"admin with admin key", "GET", "/admin/router", "Bearer admin", 200},
		// RFC 7235 §2.1: the auth scheme is case-insensitive.
		{"lower-case scheme", "POST", "/v1/completions", "bearer sk-test", 200},
		{"upper-case scheme", "POST", "/v1/completions", "BEARER sk-test", 200},
		{"lower-case scheme admin", "GET", "/admin/router", "bearer admin", 200},
		{"other scheme", "POST", "/v1/completions", "Basic sk-test", 401},
		{"scheme without token", "POST", "/v1/completions", "Bearer", 401},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, got := h.do(t, tc.method, tc.path, body, "Authorization", tc.auth)
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tc.status, got)
			}
			if tc.status == 401 {
				if e := decodeError(t, got); e.Type != openai.TypeAuthentication || e.Code != 401 {
					t.Errorf("error = %+v", e)
				}
			}
		})
	}
}

// TestAdminKeySeparate checks the API key never grants admin access: without
// an admin key, admin is for loopback clients only, whatever key a remote
// client sends.
func TestAdminKeySeparate(t *testing.T) {
	tests := []struct {
		name             string
		apiKey, adminKey string
		remote, auth     string
		want             bool
	}{
		{"api key only, remote with api key", "k", "", "10.0.0.7:5000", "Bearer k", false},
		{"api key only, loopback", "k", "", "127.0.0.1:5000", "", true},
		{"admin key, remote with it", "k", "adm", "10.0.0.7:5000", "Bearer adm", true},
		{"admin key, remote with api key", "k", "adm", "10.0.0.7:5000", "Bearer k", false},
		{"admin key, loopback without it", "k", "adm", "127.0.0.1:5000", "", false},
		{"no keys, remote", "", "", "10.0.0.7:5000", "", false},
		{"no keys, loopback v6", "", "", "[::1]:5000", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Config{Model: testModel, APIKey: tc.apiKey, AdminKey: tc.adminKey, Registry: prometheus.NewRegistry()},
				Deps{Workers: &fakePool{}, Router: &fakeRouter{}})
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/admin/router", nil)
			r.RemoteAddr = tc.remote
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			if got := s.adminAuthorized(r); got != tc.want {
				t.Errorf("adminAuthorized = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestHealthHidesAddressesWithoutAdmin checks /health gives worker URLs and
// kvxfer addresses only to admin callers.
func TestHealthHidesAddressesWithoutAdmin(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	w := a.worker(RolePrefill)
	w.KVXferAddr = "127.0.0.1:7777"
	d := newFakeWorker(t, "w-d")
	h := newHarness(t, Config{APIKey: "k", AdminKey: "adm"}, Deps{}, w, d.worker(RoleDecode))
	for _, tc := range []struct {
		name, auth string
		want       bool
	}{{"no key", "", false}, {"api key", "Bearer k", false}, {"admin key", "Bearer adm", true}} {
		t.Run(tc.name, func(t *testing.T) {
			_, body := h.do(t, "GET", "/health", "", "Authorization", tc.auth)
			for _, addr := range []string{a.srv.URL, d.srv.URL, "127.0.0.1:7777"} {
				if got := strings.Contains(string(body), addr); got != tc.want {
					t.Errorf("/health mentions %s: %v, want %v: %s", addr, got, tc.want, body)
				}
			}
			if !strings.Contains(string(body), `"id":"w-a"`) {
				t.Errorf("/health lost the worker ids: %s", body)
			}
		})
	}
}

func TestNoWorkerAvailable(t *testing.T) {
	p := newFakeWorker(t, "w-p")
	tests := []struct {
		name    string
		workers []Worker
		refused []Refusal
		reason  string
	}{
		{"none registered", nil, nil, "no workers registered"},
		{"all refused", nil, []Refusal{{ID: "w-x", Reason: "block size 32, want 16"}}, "refused"},
		{"only prefill", []Worker{p.worker(RolePrefill)}, nil, "no aggregated or decode worker"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{}, Deps{}, tc.workers...)
			h.pool.refused = tc.refused
			resp, body := h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"hi"}`)
			if resp.StatusCode != 503 {
				t.Fatalf("status = %d, want 503", resp.StatusCode)
			}
			e := decodeError(t, body)
			if e.Type != openai.TypeUnavailable || !strings.Contains(e.Message, tc.reason) {
				t.Errorf("error = %+v, want type %s mentioning %q", e, openai.TypeUnavailable, tc.reason)
			}
			resp, body = h.do(t, "GET", "/health", "")
			var hl Health
			if err := json.Unmarshal(body, &hl); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 503 || hl.Status != HealthUnavailable || !strings.Contains(hl.Reason, tc.reason) {
				t.Errorf("health = %d %+v", resp.StatusCode, hl)
			}
		})
	}
}

func TestRouterErrorIs503(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated))
	h.router.err = errors.New("index not ready")
	resp, body := h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"hi"}`)
	if e := decodeError(t, body); resp.StatusCode != 503 || !strings.Contains(e.Message, "index not ready") {
		t.Errorf("status %d error %+v", resp.StatusCode, e)
	}
}

func TestInFlightOrder(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	inf := &fakeInFlight{}
	h := newHarness(t, Config{}, Deps{InFlight: inf}, a.worker(RoleAggregated))
	h.router.overlap = 1
	resp, _ := h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":[`+strings.Repeat("1,", 47)+`1],"stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	want := []string{"start w-a 2", "stores w-a 2", "first w-a", "end w-a"} // 48 tokens = 3 blocks, 1 cached
	if got := inf.recorded(); !slices.Equal(got, want) {
		t.Errorf("in-flight events = %q, want %q", got, want)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated))
	h.do(t, "POST", "/v1/chat/completions", chatStreamBody)
	_, body := h.do(t, "GET", "/metrics", "")
	for _, name := range []string{"switchyard_requests_total{code=\"200\",endpoint=\"chat\"} 1", "switchyard_ttft_seconds_bucket",
		"switchyard_itl_seconds_count 4", "switchyard_cache_hit_tokens_total 32", "switchyard_prompt_tokens_total 100"} {
		if !strings.Contains(string(body), name) {
			t.Errorf("/metrics lacks %q", name)
		}
	}
}

func TestOverlapHeaderUsesBlockSize(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{BlockSize: 32}, Deps{}, a.worker(RoleAggregated))
	h.router.overlap = 3
	resp, _ := h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"hi"}`)
	if got, _ := strconv.Atoi(resp.Header.Get(HeaderOverlapTokens)); got != 96 {
		t.Errorf("overlap tokens = %d, want 96", got)
	}
}

// TestHealthDegradedByRefusedWorker: a worker refused for a mismatch is
// capacity the operator meant to have, so /health says degraded and why.
func TestHealthDegradedByRefusedWorker(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{}, Deps{Events: healthyEvents{}}, a.worker(RoleAggregated))
	h.pool.refused = []Refusal{{ID: "w-x", Reason: "block size 32, want 16"}}
	resp, body := h.do(t, "GET", "/health", "")
	var hl Health
	if err := json.Unmarshal(body, &hl); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || hl.Status != HealthDegraded || !strings.Contains(hl.Reason, "w-x refused") {
		t.Errorf("health = %d %+v, want 200 degraded naming w-x", resp.StatusCode, hl)
	}
}

type healthyEvents struct{}

func (healthyEvents) EventStatus(string) (EventStatus, bool) {
	return EventStatus{State: StateHealthy}, true
}

// TestOverlapSourceHeader: a response says whether its overlap came from
// KV events or from the router's approximate index.
func TestOverlapSourceHeader(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	for _, approx := range []bool{false, true} {
		h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated))
		h.router.approx = approx
		resp, _ := h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"hi"}`)
		want := map[bool]string{false: "index", true: "approx"}[approx]
		if got := resp.Header.Get(HeaderOverlapSource); got != want {
			t.Errorf("approx=%v: %s = %q, want %q", approx, HeaderOverlapSource, got, want)
		}
	}
}
