package frontend

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/engine/sim"
)

// simWorker is a real simulated engine, served in-process, that records
// the paths it was asked.
type simWorker struct {
	url   string
	mu    sync.Mutex
	paths []string
}

func newSimWorker(t testing.TB) *simWorker {
	t.Helper()
	w, err := sim.NewWorker(sim.Config{ID: "sim", Model: testModel, KVBlocks: 512, Speedup: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	sw := &simWorker{}
	h := w.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		sw.mu.Lock()
		sw.paths = append(sw.paths, r.URL.Path)
		sw.mu.Unlock()
		h.ServeHTTP(rw, r)
	}))
	t.Cleanup(func() { cancel(); <-done; srv.Close() })
	sw.url = srv.URL
	return sw
}

func (sw *simWorker) asked() []string {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return slices.Clone(sw.paths)
}

func (sw *simWorker) worker(id string, apis ...string) Worker {
	return Worker{ID: id, Role: RoleAggregated, Model: testModel, URL: sw.url, APIs: apis}
}

// volatile matches the parts of an answer that differ between two runs
// of one request: ids (made of the request id) and creation times.
var volatile = regexp.MustCompile(`"(id|item_id|created_at)":("[^"]*"|\d+)|(msg|resp)_sy-[a-z0-9.-]+`)

func normalize(b []byte) string { return volatile.ReplaceAllString(string(b), `"$1":X`) }

// seqNumber matches a Responses event's sequence_number.
var seqNumber = regexp.MustCompile(`"sequence_number":\d+`)

// summarize is an answer without what differs between two runs: a whole
// answer normalized, or a stream as its event types (a run of deltas
// counted once, as the engine's chunking may merge them), the text of
// its deltas, and its last event normalized.
func summarize(t testing.TB, b []byte) string {
	t.Helper()
	if !strings.HasPrefix(string(b), "event: ") {
		return normalize(b)
	}
	var types []string
	var text strings.Builder
	last := ""
	for _, ev := range strings.Split(strings.TrimSpace(string(b)), "\n\n") {
		name, data, ok := strings.Cut(ev, "\ndata: ")
		if !ok {
			t.Fatalf("event %q has no data line", ev)
		}
		name = strings.TrimPrefix(name, "event: ")
		var d struct {
			Type  string `json:"type"`
			Delta any    `json:"delta"`
		}
		if err := json.Unmarshal([]byte(data), &d); err != nil || d.Type != name {
			t.Fatalf("event %s: data %s does not decode to its type (%v)", name, data, err)
		}
		switch dt := d.Delta.(type) {
		case string:
			text.WriteString(dt)
		case map[string]any:
			if s, ok := dt["text"].(string); ok {
				text.WriteString(s)
			}
		}
		if n := len(types); n == 0 || types[n-1] != name || !strings.HasSuffix(name, "delta") {
			types = append(types, name)
		}
		last = seqNumber.ReplaceAllString(normalize([]byte(data)), "")
	}
	return strings.Join(types, " ") + "\ntext: " + text.String() + "\nlast: " + last
}

// TestAPIsNativeAndTranslatedAgree sends each Messages and Responses
// request to a worker serving the API itself and to one that only speaks
// chat, which the frontend translates for: the worker is asked on the
// right path, and the client gets the same answer, byte for byte but for
// ids, either way, streaming or not.
func TestAPIsNativeAndTranslatedAgree(t *testing.T) {
	long := strings.Repeat("the freight yard sorts cars onto tracks by destination ", 20)
	for _, tc := range []struct {
		name, path, native, body string
	}{
		{"messages", "/v1/messages", APIMessages, `{"model":"qwen3-0.6b","max_tokens":9,"system":[{"type":"text","text":"` + long + `"}],"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"hello"}]},{"role":"user","content":[{"type":"text","text":"go on"}]}]}`},
		{"messages stream", "/v1/messages", APIMessages, `{"model":"qwen3-0.6b","max_tokens":9,"stream":true,"system":"` + long + `","messages":[{"role":"user","content":"hi"}]}`},
		{"responses", "/v1/responses", APIResponses, `{"model":"qwen3-0.6b","max_output_tokens":9,"instructions":"` + long + `","input":[{"role":"user","content":"hi"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hello"}]},{"role":"user","content":[{"type":"input_text","text":"go on"}]}],"metadata":{"k":"v"}}`},
		{"responses stream", "/v1/responses", APIResponses, `{"model":"qwen3-0.6b","max_output_tokens":9,"stream":true,"instructions":"` + long + `","input":"hi"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nat, tra := newSimWorker(t), newSimWorker(t)
			hn := newHarness(t, Config{}, Deps{}, nat.worker("w-native", tc.native))
			ht := newHarness(t, Config{}, Deps{}, tra.worker("w-chat"))
			rn, bn := hn.do(t, "POST", tc.path, tc.body)
			rt, bt := ht.do(t, "POST", tc.path, tc.body)
			if rn.StatusCode != http.StatusOK || rt.StatusCode != http.StatusOK {
				t.Fatalf("status native %d, translated %d:\n%s\n%s", rn.StatusCode, rt.StatusCode, bn, bt)
			}
			if got := nat.asked(); !slices.Equal(got, []string{tc.path}) {
				t.Errorf("native worker asked %v, want %s", got, tc.path)
			}
			if got := tra.asked(); !slices.Equal(got, []string{"/v1/chat/completions"}) {
				t.Errorf("chat worker asked %v, want /v1/chat/completions", got)
			}
			if n, tr := summarize(t, bn), summarize(t, bt); n != tr {
				t.Errorf("native and translated answers differ:\nnative:     %s\ntranslated: %s", n, tr)
			}
			if ct := rn.Header.Get("Content-Type"); strings.Contains(tc.name, "stream") != strings.HasPrefix(ct, "text/event-stream") {
				t.Errorf("Content-Type %q", ct)
			}
			for _, b := range [][]byte{bn, bt} {
				if !strings.Contains(string(b), `"output_tokens":9`) {
					t.Errorf("answer lacks its usage (9 output tokens):\n%s", b)
				}
			}
		})
	}
}

// TestAPIsRouteAsChat: the same transcript sent as chat, as a Messages
// request and as a Responses request hashes to the same blocks, so one
// API's cache serves the others.
func TestAPIsRouteAsChat(t *testing.T) {
	sys := strings.Repeat("you are a careful assistant for the rail yard ", 12)
	w := newSimWorker(t)
	h := newHarness(t, Config{}, Deps{}, w.worker("w-1", APIMessages, APIResponses))
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"qwen3-0.6b","max_tokens":2,"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"which track?"}]}`},
		{"/v1/messages", `{"model":"qwen3-0.6b","max_tokens":2,"system":"` + sys + `","messages":[{"role":"user","content":[{"type":"text","text":"which track?"}]}]}`},
		{"/v1/responses", `{"model":"qwen3-0.6b","max_output_tokens":2,"instructions":"` + sys + `","input":"which track?"}`},
	} {
		if resp, body := h.do(t, "POST", c.path, c.body); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d: %s", c.path, resp.StatusCode, body)
		}
	}
	picks := h.router.recorded()
	if len(picks) != 3 {
		t.Fatalf("%d picks, want 3", len(picks))
	}
	if len(picks[0].Hashes) < 4 {
		t.Fatalf("chat prompt hashed to %d blocks; want a long prompt", len(picks[0].Hashes))
	}
	for i, name := range []string{"messages", "responses"} {
		if !slices.Equal(picks[i+1].Hashes, picks[0].Hashes) || picks[i+1].PromptTokens != picks[0].PromptTokens {
			t.Errorf("%s hashed %d tokens to %d blocks, chat %d tokens to %d: they must be equal",
				name, picks[i+1].PromptTokens, len(picks[i+1].Hashes), picks[0].PromptTokens, len(picks[0].Hashes))
		}
	}
	_, ct := h.do(t, "POST", "/v1/messages/count_tokens", `{"model":"qwen3-0.6b","system":"`+sys+`","messages":[{"role":"user","content":"which track?"}]}`)
	var n struct {
		InputTokens int `json:"input_tokens"`
	}
	if err := json.Unmarshal(ct, &n); err != nil || n.InputTokens != picks[0].PromptTokens {
		t.Errorf("count_tokens answered %s, want input_tokens %d", ct, picks[0].PromptTokens)
	}
}

// TestAPIErrorShapes: a bad request gets each API's own error body, from
// the frontend's checks and from the worker's alike; a key is accepted
// as x-api-key.
func TestAPIErrorShapes(t *testing.T) {
	w := newSimWorker(t)
	for _, native := range []bool{true, false} {
		wk := w.worker("w-chat")
		if native {
			wk = w.worker("w-native", APIMessages, APIResponses)
		}
		h := newHarness(t, Config{APIKey: "k"}, Deps{}, wk)
		for _, tc := range []struct {
			name, path, body string
			status           int
			hdr              []string
		}{
			{"no max_tokens", "/v1/messages", `{"model":"qwen3-0.6b","messages":[{"role":"user","content":"x"}]}`, 400, []string{"x-api-key", "k"}},
			{"not JSON", "/v1/messages", `{"model":`, 400, []string{"x-api-key", "k"}},
			{"image", "/v1/messages", `{"model":"qwen3-0.6b","max_tokens":3,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`, 400, []string{"x-api-key", "k"}},
			{"wrong key", "/v1/messages", `{}`, 401, []string{"x-api-key", "nope"}},
			{"unknown model", "/v1/messages", `{"model":"other","max_tokens":3,"messages":[{"role":"user","content":"x"}]}`, 404, []string{"x-api-key", "k", "anthropic-version", "2023-06-01"}},
			{"too long for the worker", "/v1/messages", `{"model":"qwen3-0.6b","max_tokens":100000000,"messages":[{"role":"user","content":"x"}]}`, 400, []string{"authorization", "Bearer k"}},
			{"responses no input", "/v1/responses", `{"model":"qwen3-0.6b"}`, 400, []string{"authorization", "Bearer k"}},
			{"responses content null", "/v1/responses", `{"model":"qwen3-0.6b","input":[{"role":"user","content":null}]}`, 400, []string{"authorization", "Bearer k"}},
			{"responses too long for the worker", "/v1/responses", `{"model":"qwen3-0.6b","max_output_tokens":100000000,"input":"x"}`, 400, []string{"authorization", "Bearer k"}},
		} {
			resp, body := h.do(t, "POST", tc.path, tc.body, tc.hdr...)
			if resp.StatusCode != tc.status {
				t.Errorf("native %v, %s: status %d, want %d: %s", native, tc.name, resp.StatusCode, tc.status, body)
				continue
			}
			if tc.path == "/v1/messages" {
				var e struct {
					Type  string `json:"type"`
					Error struct{ Type, Message string }
				}
				if json.Unmarshal(body, &e) != nil || e.Type != "error" || e.Error.Type == "" || e.Error.Message == "" {
					t.Errorf("native %v, %s: %s is not an Anthropic error", native, tc.name, body)
				}
				continue
			}
			var e struct {
				Error struct{ Type, Message string }
			}
			if json.Unmarshal(body, &e) != nil || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
				t.Errorf("native %v, %s: %s is not an OpenAI error", native, tc.name, body)
			}
		}
	}
}

// TestPreviousResponseAffinity: a response stored on one worker is
// continued there whichever worker the router would pick, and a clear
// error follows when that worker is gone.
func TestPreviousResponseAffinity(t *testing.T) {
	a, b := newSimWorker(t), newSimWorker(t)
	h := newHarness(t, Config{}, Deps{}, a.worker("w-a", APIResponses), b.worker("w-b", APIResponses))
	h.router.prefer = []string{"w-a"}
	resp, body := h.do(t, "POST", "/v1/responses", `{"model":"qwen3-0.6b","max_output_tokens":4,"input":"remember the number 7"}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderWorker) != "w-a" {
		t.Fatalf("first: status %d on %q: %s", resp.StatusCode, resp.Header.Get(HeaderWorker), body)
	}
	var first struct{ ID string }
	if err := json.Unmarshal(body, &first); err != nil || first.ID == "" {
		t.Fatalf("first answer %s has no id", body)
	}
	h.router.mu.Lock()
	h.router.prefer = []string{"w-b"}
	h.router.mu.Unlock()
	next := `{"model":"qwen3-0.6b","max_output_tokens":4,"stream":true,"previous_response_id":"` + first.ID + `","input":"which number?"}`
	resp, body = h.do(t, "POST", "/v1/responses", next)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderWorker) != "w-a" || resp.Header.Get(HeaderPolicy) != "previous_response" {
		t.Fatalf("continuation: status %d on %q (policy %q), want w-a: %s", resp.StatusCode, resp.Header.Get(HeaderWorker), resp.Header.Get(HeaderPolicy), body)
	}
	// The worker saw the stored conversation: more prompt than the new
	// input alone.
	if !strings.Contains(string(body), "response.completed") && !strings.Contains(string(body), "response.incomplete") {
		t.Errorf("stream did not complete:\n%s", body)
	}
	h.pool.mu.Lock()
	h.pool.workers = h.pool.workers[1:]
	h.pool.mu.Unlock()
	resp, body = h.do(t, "POST", "/v1/responses", next)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "w-a, which is gone") {
		t.Errorf("after its worker left: status %d: %s; want 400 naming the gone worker", resp.StatusCode, body)
	}
}

// FuzzAPIBodies: whatever body a client sends to /v1/messages or
// /v1/responses, the answer is never a 5xx, and a refusal is a 4xx in
// that API's own error shape.
func FuzzAPIBodies(f *testing.F) {
	for _, s := range []string{
		`{"model":"qwen3-0.6b","max_tokens":4,"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"qwen3-0.6b","input":"x","max_output_tokens":2}`,
		`{"model":"qwen3-0.6b","max_tokens":4,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":7}]}]}`,
		`{"model":"qwen3-0.6b","input":[{"type":"function_call_output","call_id":"c","output":{}}]}`,
		`{"model":"qwen3-0.6b","max_tokens":-1,"messages":[]}`, `{"input":null}`, `nul`, `{"model":"qwen3-0.6b","system":[1]}`,
	} {
		f.Add(s, true)
		f.Add(s, false)
	}
	w := newFakeWorker(f, "w-chat")
	h := newHarness(f, Config{}, Deps{}, w.worker(RoleAggregated))
	f.Fuzz(func(t *testing.T, body string, messages bool) {
		path := "/v1/responses"
		if messages {
			path = "/v1/messages"
		}
		resp, b := h.do(t, "POST", path, body)
		switch {
		case resp.StatusCode >= 500:
			t.Fatalf("%s %q: status %d: %s", path, body, resp.StatusCode, b)
		case resp.StatusCode == http.StatusOK:
			return
		}
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type, Message string
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" || messages && e.Type != "error" {
			t.Fatalf("%s %q: status %d with body %s, not the API's error shape", path, body, resp.StatusCode, b)
		}
	})
}

// TestTranslatedStreamWorkerDies: a chat worker that fails in the middle
// of a translated stream ends the client's stream with the API's error
// event.
func TestTranslatedStreamWorkerDies(t *testing.T) {
	w := newFakeWorker(t, "w-chat")
	w.setMode(modeDieMidStream)
	h := newHarness(t, Config{}, Deps{}, w.worker(RoleAggregated))
	resp, body := h.do(t, "POST", "/v1/messages", `{"model":"qwen3-0.6b","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"x"}]}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\"") {
		t.Errorf("status %d:\n%s\nwant the stream ended by an Anthropic error event", resp.StatusCode, body)
	}
	resp, body = h.do(t, "POST", "/v1/responses", `{"model":"qwen3-0.6b","stream":true,"input":"x"}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "event: error\n") || strings.Contains(string(body), "response.completed") {
		t.Errorf("status %d:\n%s\nwant the stream ended by an error event", resp.StatusCode, body)
	}
}

// TestContentNullRefused: a user (or system, or tool) message whose
// content is null or missing is a 400, as OpenAI answers; an assistant's
// (one that carried tool calls) is not.
func TestContentNullRefused(t *testing.T) {
	w := newSimWorker(t)
	h := newHarness(t, Config{}, Deps{}, w.worker("w-1"))
	for body, want := range map[string]int{
		`{"model":"qwen3-0.6b","max_tokens":2,"messages":[{"role":"user","content":null}]}`:                                                                                  400,
		`{"model":"qwen3-0.6b","max_tokens":2,"messages":[{"role":"system"},{"role":"user","content":"x"}]}`:                                                                 400,
		`{"model":"qwen3-0.6b","max_tokens":2,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[]},{"role":"user","content":"y"}]}`: 200,
	} {
		resp, b := h.do(t, "POST", "/v1/chat/completions", body)
		if resp.StatusCode != want || want == 400 && !strings.Contains(string(b), "got null") {
			t.Errorf("%s: %d %s, want %d", body, resp.StatusCode, b, want)
		}
	}
	if got := w.asked(); len(got) != 1 {
		t.Errorf("the worker was asked %d times, want only for the valid request", len(got))
	}
}

// TestEmbeddings: /v1/embeddings goes only to workers that serve it, and
// the simulated engine's embedding is a fixed-size unit vector, the same
// for the same input; /detokenize inverts /tokenize.
func TestEmbeddings(t *testing.T) {
	chatOnly, emb := newSimWorker(t), newSimWorker(t)
	h := newHarness(t, Config{}, Deps{}, chatOnly.worker("w-chat"), emb.worker("w-emb", APIEmbeddings))
	var vecs [][]float64
	for range 2 {
		resp, b := h.do(t, "POST", "/v1/embeddings", `{"model":"qwen3-0.6b","input":["the yard","the yard"]}`)
		var out struct {
			Data []struct {
				Embedding []float64 `json:"embedding"`
			} `json:"data"`
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if resp.StatusCode != 200 || resp.Header.Get(HeaderWorker) != "w-emb" || json.Unmarshal(b, &out) != nil || len(out.Data) != 2 || out.Usage.PromptTokens == 0 {
			t.Fatalf("status %d on %q: %s", resp.StatusCode, resp.Header.Get(HeaderWorker), b)
		}
		vecs = append(vecs, out.Data[0].Embedding, out.Data[1].Embedding)
	}
	norm := 0.0
	for _, x := range vecs[0] {
		norm += x * x
	}
	if len(vecs[0]) != 384 || norm < 0.999 || norm > 1.001 {
		t.Errorf("embedding of %d dimensions, squared norm %v; want 384, 1", len(vecs[0]), norm)
	}
	for _, v := range vecs[1:] {
		if !slices.Equal(v, vecs[0]) {
			t.Errorf("the same input embedded differently")
		}
	}
	if got := chatOnly.asked(); len(got) != 0 {
		t.Errorf("the worker without embeddings was asked %v", got)
	}
	if resp, b := h.do(t, "POST", "/v1/embeddings", `{"model":"qwen3-0.6b"}`); resp.StatusCode != 400 {
		t.Errorf("no input: %d %s", resp.StatusCode, b)
	}

	_, tb := h.do(t, "POST", "/tokenize", `{"prompt":"switchyards sort freight"}`)
	var toks struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(tb, &toks); err != nil {
		t.Fatal(err)
	}
	ids, _ := json.Marshal(toks.Tokens)
	resp, db := h.do(t, "POST", "/detokenize", `{"tokens":`+string(ids)+`}`)
	if resp.StatusCode != 200 || !strings.Contains(string(db), `"prompt":"switchyards sort freight"`) {
		t.Errorf("detokenize: %d %s", resp.StatusCode, db)
	}
}

// TestStopSequence: a Messages request ended by one of its stop sequences
// says so (stop_reason stop_sequence, with the sequence), streamed or not,
// natively and translated: the engine reports which stop matched.
func TestStopSequence(t *testing.T) {
	for _, native := range []bool{true, false} {
		w := newSimWorker(t)
		wk := w.worker("w-chat")
		if native {
			wk = w.worker("w-native", APIMessages)
		}
		h := newHarness(t, Config{}, Deps{}, wk)
		const req = `{"model":"qwen3-0.6b","max_tokens":12,"messages":[{"role":"user","content":"tell me about the yard"}]`
		_, b := h.do(t, "POST", "/v1/messages", req+`}`)
		var m struct {
			Content []struct{ Text string } `json:"content"`
		}
		if err := json.Unmarshal(b, &m); err != nil || len(m.Content) != 1 {
			t.Fatalf("%s", b)
		}
		words := strings.Fields(m.Content[0].Text)
		stop := words[len(words)/2]
		for _, stream := range []string{"", `,"stream":true`} {
			_, b = h.do(t, "POST", "/v1/messages", req+`,"stop_sequences":["`+stop+`"]`+stream+`}`)
			if !strings.Contains(string(b), `"stop_reason":"stop_sequence","stop_sequence":"`+stop+`"`) {
				t.Errorf("native %v, stream %q: stop %q on %q gave\n%s", native, stream, stop, m.Content[0].Text, b)
			}
		}
	}
}

// TestNativeStreamTimings: a stream relayed in the API's own events counts
// one TTFT and one ITL gap between each two text deltas, as a chat stream
// does; the events that repeat the text are not tokens.
func TestNativeStreamTimings(t *testing.T) {
	w := newSimWorker(t)
	h := newHarness(t, Config{}, Deps{}, w.worker("w-native", APIMessages, APIResponses))
	for path, body := range map[string]string{
		"/v1/messages":  `{"model":"qwen3-0.6b","max_tokens":20,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		"/v1/responses": `{"model":"qwen3-0.6b","max_output_tokens":20,"stream":true,"input":"hi"}`,
	} {
		ttft0, itl0 := value(t, h.s.m.ttft), value(t, h.s.m.itl)
		resp, b := h.do(t, "POST", path, body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		deltas := strings.Count(string(b), "event: content_block_delta\n") + strings.Count(string(b), "event: response.output_text.delta\n")
		if got := value(t, h.s.m.ttft) - ttft0; got != 1 {
			t.Errorf("%s: %v TTFT samples, want 1", path, got)
		}
		if got := value(t, h.s.m.itl) - itl0; deltas < 1 || int(got) != deltas-1 {
			t.Errorf("%s: %v ITL samples for %d text deltas, want one fewer", path, got, deltas)
		}
	}
}
