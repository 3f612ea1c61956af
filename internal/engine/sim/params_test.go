package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/jsonschema"
	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// complete posts a completions request and decodes the answer.
func complete(t testing.TB, url, body string) openai.CompletionResponse {
	t.Helper()
	code, _, b := post(t, url+"/v1/completions", body)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, b)
	}
	var r openai.CompletionResponse
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// streamChoices streams a request and returns each choice's text and
// finish reason by index, and the usage.
func streamChoices(t testing.TB, url, path, body string) (map[int]string, map[int]string, *openai.Usage) {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	texts, finish := map[int]string{}, map[int]string{}
	var usage *openai.Usage
	r := openai.NewSSEReader(resp.Body)
	for {
		p, err := r.Next()
		if errors.Is(err, openai.ErrStreamDone) {
			return texts, finish, usage
		}
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Choices []struct {
				Index        int     `json:"index"`
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
				Delta        struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *openai.Usage `json:"usage"`
		}
		if err := json.Unmarshal(p, &c); err != nil {
			t.Fatal(err)
		}
		if c.Usage != nil {
			usage = c.Usage
		}
		for _, ch := range c.Choices {
			texts[ch.Index] += ch.Text
			if ch.Delta.Content != nil {
				texts[ch.Index] += *ch.Delta.Content
			}
			if ch.FinishReason != nil {
				finish[ch.Index] = *ch.FinishReason
			}
		}
	}
}

// tokensUntil is how many output tokens of text it takes for s to appear.
func tokensUntil(t testing.TB, text, s string) int {
	t.Helper()
	tok, err := tokenizer.New()
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(text)
	for i := range ids {
		if strings.Contains(tok.Decode(ids[:i+1]), s) {
			return i + 1
		}
	}
	t.Fatalf("%q not in %q", s, text)
	return 0
}

func TestStopSequences(t *testing.T) {
	_, srv := startWorker(t, Config{})
	const base = `{"prompt":"tell me about the yard","max_tokens":60,"seed":11`
	full := complete(t, srv.URL, base+`}`).Choices[0].Text
	words := strings.Fields(full)
	// A word from the middle, as a stop string that starts mid-token (its
	// leading space stays in the text) and one that ends mid-token.
	w := ""
	for _, x := range words[len(words)/2:] {
		if len(x) >= 4 {
			w = x
			break
		}
	}
	first := strings.Index(full, w)
	if first < 0 || len(w) < 3 {
		t.Fatalf("bad pick %q in %q", w, full)
	}
	never := "zzz-never"
	tests := []struct {
		name, stop string
		wantText   string
		wantFinish string
		wantTokens int
	}{
		{"string", `"` + w + `"`, full[:first], "stop", tokensUntil(t, full, w)},
		{"list, earliest wins", `["` + never + `","` + w + `"]`, full[:first], "stop", tokensUntil(t, full, w)},
		{"prefix of a word", `"` + w[:2] + `"`, full[:strings.Index(full, w[:2])], "stop", tokensUntil(t, full, w[:2])},
		{"never matches", `["` + never + `"]`, full, "length", 60},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := complete(t, srv.URL, base+`,"stop":`+tc.stop+`}`)
			c := r.Choices[0]
			if c.Text != tc.wantText || *c.FinishReason != tc.wantFinish || r.Usage.CompletionTokens != tc.wantTokens {
				t.Errorf("got %q (%s, %d tokens), want %q (%s, %d tokens)", c.Text, *c.FinishReason, r.Usage.CompletionTokens,
					tc.wantText, tc.wantFinish, tc.wantTokens)
			}
			// Streaming holds back what could begin a stop, so the stop
			// never reaches the client either.
			texts, finish, _ := streamChoices(t, srv.URL, "/v1/completions", base+`,"stream":true,"stop":`+tc.stop+`}`)
			if texts[0] != tc.wantText || finish[0] != tc.wantFinish {
				t.Errorf("streamed %q (%s), want %q (%s)", texts[0], finish[0], tc.wantText, tc.wantFinish)
			}
			// Chat, on another prompt: cut at the earliest stop, if any.
			const chat = `{"messages":[{"role":"user","content":"hi"}],"max_tokens":60,"seed":11,"stream":true`
			all, _, _ := streamChoices(t, srv.URL, "/v1/chat/completions", chat+`}`)
			var stops openai.Stop
			if err := json.Unmarshal([]byte(tc.stop), &stops); err != nil {
				t.Fatal(err)
			}
			want, wantFinish := all[0], "length"
			for _, s := range stops {
				if i := strings.Index(all[0], s); i >= 0 && i < len(want) {
					want, wantFinish = all[0][:i], "stop"
				}
			}
			texts, finish, _ = streamChoices(t, srv.URL, "/v1/chat/completions", chat+`,"stop":`+tc.stop+`}`)
			if texts[0] != want || finish[0] != wantFinish {
				t.Errorf("chat streamed %q (%s), want %q (%s)", texts[0], finish[0], want, wantFinish)
			}
		})
	}
	// A stop inside the first min_tokens tokens does not count (vLLM's rule):
	// the text then runs on to a later match or to max_tokens.
	k := tokensUntil(t, full, w)
	r := complete(t, srv.URL, base+`,"stop":"`+w+`","min_tokens":`+itoa(k+1)+`}`)
	if got := r.Usage.CompletionTokens; got <= k {
		t.Errorf("with min_tokens, stopped after %d tokens", got)
	}
	if !strings.HasPrefix(full, r.Choices[0].Text) || len(r.Choices[0].Text) <= first {
		t.Errorf("with min_tokens past the first match, text %q should run past %q", r.Choices[0].Text, full[:first])
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestIgnoreEOSMinTokensSeed(t *testing.T) {
	_, srv := startWorker(t, Config{KVBlocks: 64}) // 1,024-token cache: ignore_eos runs to it
	const p = `{"prompt":"tell me about the yard"`
	natural := complete(t, srv.URL, p+`}`)
	if n := natural.Usage.CompletionTokens; n < 16 || n > 256 || *natural.Choices[0].FinishReason != "stop" {
		t.Fatalf("natural stop after %d tokens (%s), want 16..256 and stop", n, *natural.Choices[0].FinishReason)
	}
	eos := complete(t, srv.URL, p+`,"ignore_eos":true}`)
	if want := 1024 - natural.Usage.PromptTokens; eos.Usage.CompletionTokens != want || *eos.Choices[0].FinishReason != "length" {
		t.Errorf("ignore_eos: %d tokens (%s), want %d and length", eos.Usage.CompletionTokens, *eos.Choices[0].FinishReason, want)
	}
	minT := complete(t, srv.URL, p+`,"min_tokens":300}`)
	if minT.Usage.CompletionTokens != 300 || *minT.Choices[0].FinishReason != "stop" {
		t.Errorf("min_tokens 300: %d tokens (%s), want 300 and stop", minT.Usage.CompletionTokens, *minT.Choices[0].FinishReason)
	}
	a := complete(t, srv.URL, p+`,"max_tokens":30,"seed":1}`).Choices[0].Text
	b := complete(t, srv.URL, p+`,"max_tokens":30,"seed":1}`).Choices[0].Text
	c := complete(t, srv.URL, p+`,"max_tokens":30,"seed":2}`).Choices[0].Text
	if a != b || a == c {
		t.Errorf("seed 1 gave %q then %q; seed 2 gave %q: want equal, then different", a, b, c)
	}
}

func TestNChoices(t *testing.T) {
	_, srv := startWorker(t, Config{})
	const body = `{"prompt":"tell me about the yard","max_tokens":12,"seed":5`
	one := complete(t, srv.URL, body+`}`)
	three := complete(t, srv.URL, body+`,"n":3}`)
	if len(three.Choices) != 3 {
		t.Fatalf("%d choices, want 3", len(three.Choices))
	}
	seen := map[string]bool{}
	for i, c := range three.Choices {
		if c.Index != i || *c.FinishReason != "length" {
			t.Errorf("choice %d: index %d finish %s", i, c.Index, *c.FinishReason)
		}
		seen[c.Text] = true
	}
	if len(seen) != 3 {
		t.Errorf("choices are not distinct: %v", three.Choices)
	}
	if three.Choices[0].Text != one.Choices[0].Text {
		t.Errorf("choice 0 %q differs from the n=1 text %q", three.Choices[0].Text, one.Choices[0].Text)
	}
	if u := three.Usage; u.CompletionTokens != 36 || u.PromptTokens != one.Usage.PromptTokens {
		t.Errorf("usage %+v, want 36 completion tokens and the prompt counted once", u)
	}
	texts, finish, usage := streamChoices(t, srv.URL, "/v1/chat/completions",
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":12,"seed":5,"n":2,"stream":true,"stream_options":{"include_usage":true}}`)
	code, _, b := post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":12,"seed":5,"n":2}`)
	var cr openai.ChatResponse
	if code != 200 || json.Unmarshal(b, &cr) != nil || len(cr.Choices) != 2 {
		t.Fatalf("non-streamed n=2: %d %s", code, b)
	}
	for i := range 2 {
		if texts[i] != cr.Choices[i].Message.Content || finish[i] != "length" {
			t.Errorf("streamed choice %d %q (%s), non-streamed %q", i, texts[i], finish[i], cr.Choices[i].Message.Content)
		}
	}
	if usage == nil || usage.CompletionTokens != 24 {
		t.Errorf("streamed usage %+v, want 24 completion tokens", usage)
	}
}

// TestUnsupportedFieldsAreRefused: what the simulator cannot honour is a
// 400 naming the field, never a 200 that ignores it; what it can, or what
// asks for nothing, is accepted.
func TestUnsupportedFieldsAreRefused(t *testing.T) {
	_, srv := startWorker(t, Config{})
	const c = `{"prompt":"x","max_tokens":2,`
	const m = `{"messages":[{"role":"user","content":"x"}],"max_tokens":2,`
	refused := []struct{ name, path, body, param string }{
		{"chat logprobs", "/v1/chat/completions", m + `"logprobs":true}`, "logprobs"},
		{"completions logprobs", "/v1/completions", c + `"logprobs":1}`, "logprobs"},
		{"completions logprobs 0", "/v1/completions", c + `"logprobs":0}`, "logprobs"},
		{"top_logprobs", "/v1/chat/completions", m + `"top_logprobs":2}`, "top_logprobs"},
		{"completions tools", "/v1/completions", c + `"tools":[{"type":"function","function":{"name":"f"}}]}`, "tools"},
		{"audio modality", "/v1/chat/completions", m + `"modalities":["text","audio"]}`, "modalities"},
		{"audio", "/v1/chat/completions", m + `"audio":{"voice":"alloy","format":"wav"}}`, "audio"},
		{"response_format json", "/v1/chat/completions", m + `"response_format":{"type":"json_object"}}`, "response_format"},
		{"logit_bias", "/v1/completions", c + `"logit_bias":{"50256":-100}}`, "logit_bias"},
		{"echo", "/v1/completions", c + `"echo":true}`, "echo"},
		{"suffix", "/v1/completions", c + `"suffix":"!"}`, "suffix"},
		{"best_of", "/v1/completions", c + `"best_of":3}`, "best_of"},
		{"priority", "/v1/completions", c + `"priority":1}`, "priority"},
		{"unknown field", "/v1/completions", c + `"guided_json":{"type":"object"}}`, "guided_json"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			code, _, b := post(t, srv.URL+tc.path, tc.body)
			var e struct{ Error openai.ErrorBody }
			if code != 400 || json.Unmarshal(b, &e) != nil || e.Error.Param == nil || *e.Error.Param != tc.param ||
				!strings.Contains(e.Error.Message, "the simulated engine does not support \""+tc.param+"\"") {
				t.Errorf("got %d %s, want 400 naming %s", code, b, tc.param)
			}
		})
	}
	accepted := []struct{ name, path, body string }{
		{"logprobs false", "/v1/chat/completions", m + `"logprobs":false}`},
		{"empty tools", "/v1/chat/completions", m + `"tools":[],"tool_choice":"none","parallel_tool_calls":false}`},
		{"text format", "/v1/chat/completions", m + `"response_format":{"type":"text"}}`},
		{"sampling shape", "/v1/completions", c + `"temperature":0.7,"top_p":0.9,"top_k":40,"min_p":0.1,"presence_penalty":1,"frequency_penalty":-1,"repetition_penalty":1.2,"user":"u"}`},
		{"best_of equal to n", "/v1/completions", c + `"n":2,"best_of":2}`},
		{"tools, auto", "/v1/chat/completions", m + `"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto"}`},
		{"harmless standard fields", "/v1/chat/completions", m + `"store":true,"metadata":{"k":"v"},"service_tier":"auto","reasoning_effort":"low",` +
			`"modalities":["text"],"verbosity":"low","prompt_cache_key":"p","safety_identifier":"s","prediction":{"type":"content","content":"x"},"web_search_options":{}}`},
	}
	for _, tc := range accepted {
		t.Run(tc.name, func(t *testing.T) {
			if code, _, b := post(t, srv.URL+tc.path, tc.body); code != 200 {
				t.Errorf("got %d %s, want 200", code, b)
			}
		})
	}
	toolErrs := []struct{ name, body, param string }{
		{"required without tools", m + `"tool_choice":"required"}`, "tool_choice"},
		{"named tool not in tools", m + `"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, "tool_choice"},
		{"tool without a name", m + `"tools":[{"type":"function","function":{}}]}`, "tools"},
	}
	for _, tc := range toolErrs {
		t.Run(tc.name, func(t *testing.T) {
			code, _, b := post(t, srv.URL+"/v1/chat/completions", tc.body)
			var e struct{ Error openai.ErrorBody }
			if code != 400 || json.Unmarshal(b, &e) != nil || e.Error.Param == nil || *e.Error.Param != tc.param {
				t.Errorf("got %d %s, want 400 naming %s", code, b, tc.param)
			}
		})
	}
	types := []struct{ name, body, param string }{
		{"stop number", c + `"stop":123}`, "stop"},
		{"logprobs negative", c + `"logprobs":-1}`, "logprobs"},
		{"n zero", c + `"n":0}`, "n"},
	}
	for _, tc := range types {
		t.Run(tc.name, func(t *testing.T) {
			code, _, b := post(t, srv.URL+"/v1/completions", tc.body)
			var e struct{ Error openai.ErrorBody }
			if code != 400 || json.Unmarshal(b, &e) != nil || e.Error.Param == nil || *e.Error.Param != tc.param {
				t.Errorf("got %d %s, want 400 naming %s", code, b, tc.param)
			}
		})
	}
}

// TestContextLengthCheckedFirst: a request longer than max_model_len gets
// vLLM's message, with the prompt's field as param when the prompt alone
// is too long and the max_tokens field used otherwise, before any word
// about the KV cache.
func TestContextLengthCheckedFirst(t *testing.T) {
	w, srv := startWorker(t, Config{})
	maxLen := w.MaxModelLen()
	if maxLen != 40960 {
		t.Fatalf("max_model_len %d, want qwen3-0.6b's 40960 (the cache holds more)", maxLen)
	}
	long := essay(45000, 1) // > 40960 tokens
	tok, _ := tokenizer.New()
	chatTokens := len(tok.Encode(tokenizer.ChatPrompt([]openai.Message{{Role: "user", Content: long}})))
	compTokens := len(tok.Encode(long))
	short := len(tok.Encode(tokenizer.ChatPrompt([]openai.Message{{Role: "user", Content: "hi"}})))
	msgOf := func(what string) func(p, c int) string {
		return func(p, c int) string {
			return fmt.Sprintf("This model's maximum context length is 40960 tokens. However, you requested %d tokens (%d in the %s, %d in the completion). Please reduce the length of the %s or completion.", p+c, p, what, c, what)
		}
	}
	msg, promptMsg := msgOf("messages"), msgOf("prompt") // a completion's prompt is not messages
	tests := []struct{ name, path, body, param, msg string }{
		{"chat prompt too long", "/v1/chat/completions", mustJSON(t, map[string]any{"messages": []map[string]string{{"role": "user", "content": long}}}), "messages", msg(chatTokens, 1)},
		{"chat prompt too long with max_tokens", "/v1/chat/completions", mustJSON(t, map[string]any{"messages": []map[string]string{{"role": "user", "content": long}}, "max_tokens": 10}), "messages", msg(chatTokens, 10)},
		{"completions prompt too long", "/v1/completions", mustJSON(t, map[string]any{"prompt": long, "max_tokens": 16}), "prompt", promptMsg(compTokens, 16)},
		{"max_tokens too large", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1000000}`, "max_tokens", msg(short, 1000000)},
		{"max_completion_tokens too large", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":40960}`, "max_completion_tokens", msg(short, 40960)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, b := post(t, srv.URL+tc.path, tc.body)
			var e struct{ Error openai.ErrorBody }
			if err := json.Unmarshal(b, &e); err != nil || code != 400 {
				t.Fatalf("status %d %s", code, b)
			}
			if e.Error.Param == nil || *e.Error.Param != tc.param || e.Error.Message != tc.msg {
				t.Errorf("param %v message %q\nwant param %q message %q", e.Error.Param, e.Error.Message, tc.param, tc.msg)
			}
		})
	}
	// Exactly at the limit is accepted.
	at := 40960 - short
	if aerr := w.checkContext(short, &at, "messages", "max_tokens"); aerr != nil {
		t.Errorf("prompt + max_tokens = max_model_len refused: %v", aerr)
	}
}

// TestForcedToolCall: a chat request whose tool_choice requires a call is
// answered with a call of that function, streamed or not, whose arguments
// are valid against its parameters schema and the same for the same
// request.
func TestForcedToolCall(t *testing.T) {
	_, srv := startWorker(t, Config{})
	schema := map[string]any{"type": "object", "required": []any{"city", "days", "units", "stops"}, "additionalProperties": false,
		"properties": map[string]any{
			"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"},
			"units": map[string]any{"type": "string", "enum": []any{"metric", "imperial"}},
			"stops": map[string]any{"type": "array", "minItems": 2, "items": map[string]any{"type": "object", "required": []any{"name"},
				"properties": map[string]any{"name": map[string]any{"type": "string"}, "open": map[string]any{"type": "boolean"}}}},
		}}
	tools, _ := json.Marshal([]any{
		map[string]any{"type": "function", "function": map[string]any{"name": "other", "parameters": map[string]any{"type": "object"}}},
		map[string]any{"type": "function", "function": map[string]any{"name": "forecast", "parameters": schema}},
	})
	body := `{"messages":[{"role":"user","content":"weather in the yard?"}],"max_tokens":6,"tools":` + string(tools) +
		`,"tool_choice":{"type":"function","function":{"name":"forecast"}}`
	var calls []openai.ToolCall
	for range 2 {
		code, _, b := post(t, srv.URL+"/v1/chat/completions", body+`}`)
		var resp struct {
			Choices []struct {
				Message struct {
					Content   *string           `json:"content"`
					ToolCalls []openai.ToolCall `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if code != 200 || json.Unmarshal(b, &resp) != nil || len(resp.Choices) != 1 || len(resp.Choices[0].Message.ToolCalls) != 1 ||
			resp.Choices[0].FinishReason != "tool_calls" || resp.Choices[0].Message.Content != nil {
			t.Fatalf("got %d %s, want one tool call, content null, finish tool_calls", code, b)
		}
		calls = append(calls, resp.Choices[0].Message.ToolCalls[0])
	}
	c := calls[0]
	if c.Function.Name != "forecast" || c.Type != "function" || c.ID == "" || c.Index != nil {
		t.Errorf("call %+v", c)
	}
	var args any
	if err := json.Unmarshal([]byte(c.Function.Arguments), &args); err != nil {
		t.Fatalf("arguments %q: %v", c.Function.Arguments, err)
	}
	if errs := jsonschema.Validate(schema, args); len(errs) > 0 {
		t.Errorf("arguments %s are not valid against the schema: %v", c.Function.Arguments, errs)
	}
	if calls[1].Function.Arguments != c.Function.Arguments {
		t.Errorf("arguments differ for the same request: %s and %s", c.Function.Arguments, calls[1].Function.Arguments)
	}

	code, _, b := post(t, srv.URL+"/v1/chat/completions", body+`,"stream":true}`)
	if code != 200 {
		t.Fatalf("stream: %d %s", code, b)
	}
	var got openai.ToolCall
	finish := ""
	for _, ev := range strings.Split(strings.TrimSpace(string(b)), "\n\n") {
		p := strings.TrimPrefix(ev, "data: ")
		if p == "[DONE]" {
			break
		}
		var ch openai.ChatStreamChunk
		if err := json.Unmarshal([]byte(p), &ch); err != nil {
			t.Fatalf("chunk %s: %v", p, err)
		}
		if len(ch.Choices) == 0 {
			continue
		}
		if d := ch.Choices[0].Delta.Content; d != nil && *d != "" {
			t.Errorf("text chunk %s in a tool call's stream", p)
		}
		if tc := ch.Choices[0].Delta.ToolCalls; len(tc) == 1 {
			got = tc[0]
		}
		if f := ch.Choices[0].FinishReason; f != nil {
			finish = *f
		}
	}
	if got.Function.Name != "forecast" || got.Function.Arguments != c.Function.Arguments || finish != "tool_calls" || got.Index == nil {
		t.Errorf("streamed call %+v (finish %q), want the same call as the whole answer's, finish tool_calls", got, finish)
	}
}
