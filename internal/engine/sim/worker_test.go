package sim

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

func TestPrefixHitLowersTTFT(t *testing.T) {
	_, srv := startWorker(t, Config{})
	prompt := essay(1500, 1)
	tok, _ := tokenizer.New()
	n := len(tok.Encode(prompt))
	body := mustJSON(t, map[string]any{"prompt": prompt, "max_tokens": 4})
	var ttft [2]float64
	var usage [2]openai.Usage
	for i := range 2 {
		code, h, b := post(t, srv.URL+"/v1/completions", body)
		if code != 200 {
			t.Fatalf("status %d: %s", code, b)
		}
		var r openai.CompletionResponse
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		usage[i] = *r.Usage
		ttft[i], _ = strconv.ParseFloat(h.Get(HeaderTTFT), 64)
	}
	if usage[0].PromptTokens != n || usage[0].CompletionTokens != 4 {
		t.Errorf("usage %+v, want %d prompt and 4 completion tokens", usage[0], n)
	}
	if got := usage[0].PromptTokensDetails.CachedTokens; got != 0 {
		t.Errorf("first request cached_tokens = %d, want 0", got)
	}
	full := n / 16 * 16
	if n%16 == 0 {
		full -= 16
	}
	if got := usage[1].PromptTokensDetails.CachedTokens; got < full {
		t.Errorf("second request cached_tokens = %d, want ≥ %d (full blocks of %d tokens)", got, full, n)
	}
	if !(ttft[1] < ttft[0]/2) {
		t.Errorf("simulated TTFT %.3f ms then %.3f ms, want the cached one under half", ttft[0], ttft[1])
	}
}

func TestSaltIsolation(t *testing.T) {
	_, srv := startWorker(t, Config{})
	prompt := essay(400, 2)
	cached := func(salt string) int {
		req := map[string]any{"prompt": prompt, "max_tokens": 1}
		if salt != "" {
			req["cache_salt"] = salt
		}
		code, _, b := post(t, srv.URL+"/v1/completions", mustJSON(t, req))
		if code != 200 {
			t.Fatalf("status %d: %s", code, b)
		}
		var r openai.CompletionResponse
		_ = json.Unmarshal(b, &r)
		return r.Usage.PromptTokensDetails.CachedTokens
	}
	if got := cached("tenant-a"); got != 0 {
		t.Errorf("tenant-a first: cached %d, want 0", got)
	}
	if got := cached("tenant-b"); got != 0 {
		t.Errorf("tenant-b after tenant-a: cached %d, want 0", got)
	}
	if got := cached(""); got != 0 {
		t.Errorf("unsalted after salted: cached %d, want 0", got)
	}
	if got := cached("tenant-a"); got == 0 {
		t.Error("tenant-a again: cached 0, want a hit")
	}
}

func TestPreemptionCompletesEveryRequest(t *testing.T) {
	// 50 blocks of 16 tokens; 8 requests of 321 prompt + 100 output tokens.
	// Two prompts (21 blocks each) are admitted together, then outgrow the
	// cache (27 blocks each at the end): one must be preempted.
	w, err := NewWorker(Config{KVBlocks: 50, Speedup: 1000})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := tokenizer.New()
	// Queue all eight before the scheduler starts, so the run is the same
	// however the host schedules goroutines.
	var streams []*Stream
	for i := range 8 {
		st, err := w.Submit(Request{Tokens: tok.Encode(essay(300, 10+i)), MaxTokens: 100})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { defer close(runDone); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-runDone })
	preemptions := 0
	for _, st := range streams {
		for {
			_, done, err := st.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if done {
				break
			}
		}
		res := st.Result()
		st.Close()
		if len(res.Output) != 100 || res.FinishReason != "length" {
			t.Errorf("output %d tokens (%s), want 100 (length)", len(res.Output), res.FinishReason)
		}
		preemptions += res.Preemptions
	}
	if preemptions == 0 {
		t.Error("no request was preempted; the test no longer exercises preemption")
	}
	if l := w.Load(); l.UsedBlocks != 0 || l.Running != 0 || l.Waiting != 0 {
		t.Errorf("after all finished: %+v, want nothing used or queued", l)
	}
	// Preemption recomputes: the outputs are the same as unpreempted runs.
	toks := tok.Encode(essay(300, 10))
	a, _ := w.Generate(ctx, Request{Tokens: toks, MaxTokens: 100})
	b, _ := w.Generate(ctx, Request{Tokens: toks, MaxTokens: 100})
	if !equalTokens(a.Output, b.Output) {
		t.Error("same prompt gave different outputs")
	}
}

func equalTokens(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestNeverFitsIsRejected(t *testing.T) {
	w, srv := startWorker(t, Config{KVBlocks: 10})
	if _, err := w.Submit(Request{Tokens: make([]uint32, 200), MaxTokens: 10}); !errors.Is(err, ErrNeverFits) {
		t.Errorf("Submit error %v, want ErrNeverFits", err)
	}
	// Over HTTP the advertised max_model_len (here the cache's 160 tokens)
	// is checked first, as vLLM does: TestContextLengthCheckedFirst.
	code, _, b := post(t, srv.URL+"/v1/completions", mustJSON(t, map[string]any{"prompt": essay(300, 3), "max_tokens": 5}))
	if code != 400 || !strings.Contains(string(b), "maximum context length is 160 tokens") {
		t.Errorf("status %d body %s, want 400 naming the context length", code, b)
	}
}

func TestSubmitHugeMaxTokens(t *testing.T) {
	w, _ := startWorker(t, Config{})
	for _, mt := range []int{math.MaxInt, math.MaxInt - 1, math.MaxInt / 2} {
		if _, err := w.Submit(Request{Tokens: []uint32{1, 2, 3}, MaxTokens: mt}); !errors.Is(err, ErrNeverFits) && !errors.Is(err, ErrContextLength) {
			t.Errorf("Submit(max_tokens %d) error %v, want ErrNeverFits or ErrContextLength", mt, err)
		}
	}
}

func TestHTTPErrors(t *testing.T) {
	_, srv := startWorker(t, Config{})
	big := `{"prompt":"` + strings.Repeat("a", MaxBodyBytes) + `"}`
	tests := []struct {
		name, path, body string
		want             int
	}{
		{"malformed json", "/v1/completions", `{"prompt": "hi"`, 400},
		{"wrong type", "/v1/completions", `{"prompt": "hi", "max_tokens": "ten"}`, 400},
		{"prompt wrong type", "/v1/completions", `{"prompt": {"a": 1}}`, 400},
		{"zero max_tokens", "/v1/completions", `{"prompt": "hi", "max_tokens": 0}`, 400},
		{"beyond context", "/v1/completions", `{"prompt": "hi", "max_tokens": 1000000}`, 400},
		// 2^63−1 once overflowed the length check and panicked in make().
		{"max_tokens max int64", "/v1/completions", `{"prompt": "hi", "max_tokens": 9223372036854775807}`, 400},
		{"max_completion_tokens max int64", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 9223372036854775807}`, 400},
		{"max_tokens beyond int64", "/v1/completions", `{"prompt": "hi", "max_tokens": 9223372036854775808}`, 400},
		{"max_tokens min int64", "/v1/completions", `{"prompt": "hi", "max_tokens": -9223372036854775808}`, 400},
		{"unknown model", "/v1/completions", `{"model": "gpt-9", "prompt": "hi"}`, 404},
		{"oversized", "/v1/completions", big, 413},
		{"no messages", "/v1/chat/completions", `{"messages": []}`, 400},
		{"token out of vocabulary", "/v1/completions", `{"prompt": [1, 999999999]}`, 400},
		{"stream_options without stream", "/v1/completions", `{"prompt": "hi", "stream_options": {"include_usage": true}}`, 400},
		{"no kv transfer", "/v1/completions", `{"prompt": "hi", "kv_transfer_params": {"do_remote_decode": true}}`, 400},
		{"temperature out of range", "/v1/completions", `{"prompt": "hi", "temperature": 3}`, 400},
		{"top_p out of range", "/v1/completions", `{"prompt": "hi", "top_p": 0}`, 400},
		{"image content part", "/v1/chat/completions", `{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}`, 400},
		{"unknown path", "/v1/audio/speech", `{}`, 404},
		{"wrong method", "/v1/models", `{}`, 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, b := post(t, srv.URL+tt.path, tt.body)
			if code != tt.want {
				t.Fatalf("status %d, want %d (%s)", code, tt.want, b)
			}
			var e openai.ErrorResponse
			if err := json.Unmarshal(b, &e); err != nil || e.Error.Code != tt.want || e.Error.Message == "" {
				t.Errorf("body %s is not an OpenAI error with code %d", b, tt.want)
			}
		})
	}
}

func TestChatContentParts(t *testing.T) {
	_, srv := startWorker(t, Config{})
	parts := `{"messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "text", "text": "world"}]}], "max_tokens": 4, "seed": 1}`
	plain := `{"messages": [{"role": "user", "content": "hello\nworld"}], "max_tokens": 4, "seed": 1}`
	var got [2]openai.ChatResponse
	for i, body := range []string{parts, plain} {
		code, _, b := post(t, srv.URL+"/v1/chat/completions", body)
		if code != 200 {
			t.Fatalf("status %d: %s", code, b)
		}
		if err := json.Unmarshal(b, &got[i]); err != nil {
			t.Fatal(err)
		}
	}
	if got[0].Usage.PromptTokens != got[1].Usage.PromptTokens || got[0].Choices[0].Message.Content != got[1].Choices[0].Message.Content {
		t.Errorf("content parts %+v differ from the joined string %+v", got[0], got[1])
	}
}

func TestStreamingAndDeterminism(t *testing.T) {
	_, srv := startWorker(t, Config{})
	body := `{"messages":[{"role":"user","content":"tell me a story"}],"max_tokens":20,"seed":7,"stream":true,"stream_options":{"include_usage":true}}`
	req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("x-request-id", "req-42")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := resp.Header.Get("Content-Type"); got != "text/event-stream" {
		t.Errorf("content type %q", got)
	}
	r := openai.NewSSEReader(resp.Body)
	var text strings.Builder
	var usage *openai.Usage
	var finish string
	for {
		p, err := r.Next()
		if errors.Is(err, openai.ErrStreamDone) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var c openai.ChatChunk
		if err := json.Unmarshal(p, &c); err != nil {
			t.Fatal(err)
		}
		if c.ID != "chatcmpl-req-42" {
			t.Errorf("chunk id %q, want chatcmpl-req-42", c.ID)
		}
		if c.Usage != nil {
			usage = c.Usage
			continue
		}
		if d := c.Choices[0].Delta.Content; d != nil {
			text.WriteString(*d)
		}
		if f := c.Choices[0].FinishReason; f != nil {
			finish = *f
		}
	}
	if usage == nil || usage.CompletionTokens != 20 || finish != "length" {
		t.Fatalf("usage %+v finish %q, want 20 completion tokens and length", usage, finish)
	}
	// The same request without streaming gives the same text.
	nonStream := strings.Replace(body, `"stream":true,"stream_options":{"include_usage":true}`, `"stream":false`, 1)
	_, _, b := post(t, srv.URL+"/v1/chat/completions", nonStream)
	var cr openai.ChatResponse
	if err := json.Unmarshal(b, &cr); err != nil {
		t.Fatal(err)
	}
	if cr.Choices[0].Message.Content != text.String() {
		t.Errorf("non-streamed %q != streamed %q", cr.Choices[0].Message.Content, text.String())
	}
	tok, _ := tokenizer.New()
	if got := len(tok.Encode(text.String())); got != 20 {
		t.Errorf("generated text re-encodes to %d tokens, want 20", got)
	}
}

func TestClientDisconnectFreesBlocks(t *testing.T) {
	w, srv := startWorker(t, Config{Speedup: 1})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/completions",
		strings.NewReader(`{"prompt":"`+essay(200, 4)+`","max_tokens":20000,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the first token, so the request holds blocks.
	if _, err := openai.NewSSEReader(resp.Body).Next(); err != nil {
		t.Fatal(err)
	}
	if w.Load().UsedBlocks == 0 {
		t.Fatal("a running request holds no blocks")
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for w.Load().UsedBlocks != 0 || w.Load().Running != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("blocks still held after the client left: %+v", w.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestModelsHealthMetricsReset(t *testing.T) {
	_, srv := startWorker(t, Config{ID: "w7"})
	post(t, srv.URL+"/v1/completions", `{"prompt":"`+essay(100, 5)+`","max_tokens":3}`)
	resp, err := http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var ml openai.ModelList
	_ = json.NewDecoder(resp.Body).Decode(&ml)
	resp.Body.Close()
	if len(ml.Data) != 1 || ml.Data[0].ID != "qwen3-0.6b" || ml.Data[0].MaxModelLen != 40960 {
		t.Errorf("models %+v", ml)
	}
	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	resp.Body.Close()
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:time_to_first_token_seconds_bucket",
		"vllm:inter_token_latency_seconds_bucket", "switchyard_worker_pacing_lag_seconds_count", `engine="w7"`, `model_name="qwen3-0.6b"`} {
		if !strings.Contains(sb.String(), name) {
			t.Errorf("metrics lack %s", name)
		}
	}
	if code, _, b := post(t, srv.URL+"/reset_prefix_cache", ""); code != 200 || !strings.Contains(string(b), `"cleared_blocks":`) {
		t.Errorf("reset: %d %s", code, b)
	}
	if resp, err := http.Get(srv.URL + "/health"); err != nil || resp.StatusCode != 200 {
		t.Errorf("health: %v", err)
	}
}

// TestEventGolden runs a scripted workload on one engine, stepping it by
// hand, and compares every published step with testdata/events.golden.
func TestEventGolden(t *testing.T) {
	log := &eventLog{}
	w, err := NewWorker(Config{KVBlocks: 12, BlockSize: 4, MaxNumBatchedTokens: 64, Publisher: log})
	if err != nil {
		t.Fatal(err)
	}
	e := w.Engine
	var st stepState
	drain := func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for e.step(&st) != 0 {
		}
	}
	seq := func(start, n int) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = uint32(start + i)
		}
		return out
	}
	submit := func(r Request) {
		if _, err := e.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	submit(Request{Tokens: seq(100, 10), MaxTokens: 3})            // 2 full prompt blocks, 1 more from output
	drain()                                                        //
	submit(Request{Tokens: seq(100, 10), MaxTokens: 2})            // hits 2 blocks
	submit(Request{Tokens: seq(100, 10), MaxTokens: 2, Salt: "s"}) // salted: its own chain
	drain()
	submit(Request{Tokens: seq(500, 30), MaxTokens: 2}) // needs 8 blocks: evicts
	drain()
	if err := e.InsertBlocks(kvindex.Root(""), []uint64{kvindex.HashBlock(kvindex.Root(""), seq(900, 4))}); err != nil {
		t.Fatal(err)
	}
	e.ResetPrefixCache()

	var got strings.Builder
	for i, step := range log.all() {
		for _, ev := range step {
			got.WriteString(strconv.Itoa(i) + " " + ev.Kind.String())
			if ev.Kind == kvevents.Stored {
				got.WriteString(" parent=" + strconv.FormatUint(ev.Parent, 16))
			}
			for _, h := range ev.Hashes {
				got.WriteString(" " + strconv.FormatUint(h, 16))
			}
			got.WriteString("\n")
		}
	}
	path := filepath.Join("testdata", "events.golden")
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(path, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with UPDATE_GOLDEN=1 to create it)", err)
	}
	if got.String() != string(want) {
		t.Errorf("events differ from %s:\ngot:\n%s\nwant:\n%s", path, got.String(), want)
	}
	// The hashes are the frontend's: the first Stored chain is HashChain's.
	first := log.all()[0][0]
	if chain := kvindex.HashChain(nil, "", seq(100, 12), 4); first.Hashes[0] != chain[0] || first.Hashes[1] != chain[1] {
		t.Errorf("stored hashes %x, want kvindex.HashChain %x", first.Hashes, chain)
	}
}

func TestLoadSnapshotAndPrefillTime(t *testing.T) {
	w, err := NewWorker(Config{KVBlocks: 100})
	if err != nil {
		t.Fatal(err)
	}
	toks := make([]uint32, 100)
	for i := range toks {
		toks[i] = uint32(i + 1)
	}
	st, err := w.Submit(Request{Tokens: toks, MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	if l := w.Load(); l.Waiting != 1 || l.QueuedPrefillTokens != 100 || l.UsedBlocks != 0 || l.TotalBlocks != 100 {
		t.Errorf("load before a step: %+v", l)
	}
	var ss stepState
	w.mu.Lock()
	dt := w.step(&ss)
	w.mu.Unlock()
	if want := w.PrefillTime(100, 0); dt != want {
		t.Errorf("prefill step took %v, PrefillTime predicts %v", dt, want)
	}
	if l := w.Load(); l.Running != 1 || l.QueuedPrefillTokens != 0 || l.ActiveDecodeBlocks != 7 || l.KVUsage != 0.07 {
		t.Errorf("load after prefill: %+v", l)
	}
	var snap []uint64
	w.SnapshotBlocks(func(h []uint64) { snap = append(snap, h...) })
	if want := kvindex.HashChain(nil, "", toks, 16); !equalHashes(snap, want) {
		t.Errorf("snapshot %x, want %x", snap, want)
	}
	st.Close()
	if l := w.Load(); l.UsedBlocks != 0 || l.Running != 0 {
		t.Errorf("after Close: %+v", l)
	}
}

func equalHashes(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestHealthAfterStop: a worker whose engine has stopped says so on
// /health (503) instead of answering ok.
func TestHealthAfterStop(t *testing.T) {
	w, err := NewWorker(Config{Speedup: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	srv := httptest.NewServer(w.Handler())
	defer srv.Close()
	if resp, err := http.Get(srv.URL + "/health"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("health while running: %v %v", err, resp)
	}
	cancel()
	<-done
	resp, err := http.Get(srv.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("health after stop = %d, want 503", resp.StatusCode)
	}
}
