package frontend

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
)

// fullSurface carries every OpenAI field and vLLM extension the frontend
// does not itself act on, with values a real engine would honour; seed is
// beyond float64's exact range, so any decode-and-re-encode would show.
const fullSurfaceFields = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],` +
	`"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false,` +
	`"top_logprobs":3,"response_format":{"type":"json_schema","json_schema":{"name":"w","schema":{"type":"object"}}},` +
	`"seed":9007199254740993,"n":2,"ignore_eos":true,"min_tokens":3,"cache_salt":"tenant-a","stop":["last","\u00e9t\u00e9"],` +
	`"presence_penalty":0.5,"frequency_penalty":-0.5,"logit_bias":{"1234":-100},"top_k":40,"min_p":0.05,"repetition_penalty":1.1,` +
	`"user":"u-1","priority":3,"guided_json":{"type":"object"},"chat_template_kwargs":{"enable_thinking":false},"metadata":{"k":"v"}`

// TestForwardsEveryFieldUntouched proves with a recording upstream that the
// frontend forwards what it does not itself need, so a real engine behind
// it gets the full OpenAI surface: on the aggregated path the body arrives
// byte for byte; on the disaggregated path every field but
// kv_transfer_params arrives with its exact value.
func TestForwardsEveryFieldUntouched(t *testing.T) {
	chat := `{"model":"qwen3-0.6b","messages":[{"role":"user","content":"weather?","name":"n1"}],"max_tokens":8,"logprobs":true,` + fullSurfaceFields + `}`
	comp := `{"model":"qwen3-0.6b","prompt":"weather?","max_tokens":8,"logprobs":2,"echo":false,"suffix":"!","best_of":2,` + fullSurfaceFields + `}`
	streamChat := `{"model":"qwen3-0.6b","messages":[{"role":"user","content":"weather?"}],"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},` + fullSurfaceFields + `}`
	for _, tc := range []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", chat},
		{"completions", "/v1/completions", comp},
		{"chat stream", "/v1/chat/completions", streamChat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWorker(t, "w-a")
			h := newHarness(t, Config{}, Deps{}, w.worker(RoleAggregated))
			resp, body := h.do(t, "POST", tc.path, tc.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if got := w.received(); len(got) != 1 || string(got[0]) != tc.body {
				t.Errorf("worker received\n%s\nwant the client's body byte for byte\n%s", got, tc.body)
			}
		})
		t.Run(tc.name+" disaggregated", func(t *testing.T) {
			p, d := newFakeWorker(t, "w-p"), newFakeWorker(t, "w-d")
			h := newHarness(t, Config{}, Deps{Gate: &fakeGate{decision: GateDecision{Remote: true}}}, p.worker(RolePrefill), d.worker(RoleDecode))
			resp, body := h.do(t, "POST", tc.path, tc.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			got := d.received()
			if len(got) != 1 {
				t.Fatalf("decode worker got %d requests", len(got))
			}
			gf, wf := rawFields(t, got[0]), rawFields(t, []byte(tc.body))
			if _, ok := gf["kv_transfer_params"]; !ok {
				t.Errorf("decode request lacks kv_transfer_params")
			}
			delete(gf, "kv_transfer_params")
			for k, want := range wf {
				if g, ok := gf[k]; !ok || !bytes.Equal(g, want) {
					t.Errorf("field %s reached the decode worker as %s, want %s", k, g, want)
				}
			}
			if len(gf) != len(wf) {
				t.Errorf("decode request has %d fields besides kv_transfer_params, want %d", len(gf), len(wf))
			}
			// The prefill half keeps the client's fields too, less what only
			// decode acts on.
			pf := rawFields(t, p.received()[0])
			for _, k := range []string{"tools", "response_format", "seed", "cache_salt", "guided_json", "logit_bias"} {
				if !bytes.Equal(pf[k], wf[k]) {
					t.Errorf("prefill request field %s = %s, want %s", k, pf[k], wf[k])
				}
			}
			for _, k := range []string{"n", "min_tokens", "stream_options"} {
				if _, ok := pf[k]; ok {
					t.Errorf("prefill request keeps %s", k)
				}
			}
		})
	}
}

// rawFields decodes a JSON object's top-level fields, each compacted.
func rawFields(t testing.TB, body []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	for k, v := range m {
		var b bytes.Buffer
		if err := json.Compact(&b, v); err != nil {
			t.Fatal(err)
		}
		m[k] = b.Bytes()
	}
	return m
}

// TestValidatesFieldTypesAndRanges checks the fields the frontend forwards
// without using: a wrong type or value is a 400 naming the field, before
// any worker sees it.
func TestValidatesFieldTypesAndRanges(t *testing.T) {
	w := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{}, Deps{}, w.worker(RoleAggregated))
	const c = `{"model":"qwen3-0.6b","prompt":"x",`
	const m = `{"model":"qwen3-0.6b","messages":[{"role":"user","content":"x"}],`
	tests := []struct{ name, path, body, param, msg string }{
		{"stop number", "/v1/completions", c + `"stop":123}`, "stop", "want a string or an array of strings"},
		{"stop list of numbers", "/v1/chat/completions", m + `"stop":[1,2]}`, "stop", "want a string or an array of strings"},
		{"stop empty string", "/v1/completions", c + `"stop":[""]}`, "stop", "stop[0] is empty"},
		{"completions logprobs negative", "/v1/completions", c + `"logprobs":-1}`, "logprobs", "integer in 0..20"},
		{"completions logprobs bool", "/v1/completions", c + `"logprobs":true}`, "logprobs", "integer in 0..20"},
		{"chat logprobs number", "/v1/chat/completions", m + `"logprobs":-1}`, "logprobs", "true or false"},
		{"top_logprobs too many", "/v1/chat/completions", m + `"logprobs":true,"top_logprobs":21}`, "top_logprobs", "0..20"},
		{"n zero", "/v1/completions", c + `"n":0}`, "n", "1..128"},
		{"n string", "/v1/completions", c + `"n":"2"}`, "n", "want an integer"},
		{"seed fraction", "/v1/completions", c + `"seed":1.5}`, "seed", "want an integer"},
		{"ignore_eos string", "/v1/completions", c + `"ignore_eos":"yes"}`, "ignore_eos", "want true or false"},
		{"min_tokens above max_tokens", "/v1/completions", c + `"max_tokens":4,"min_tokens":5}`, "min_tokens", "between 0 and max_tokens"},
		{"cache_salt number", "/v1/completions", c + `"cache_salt":5}`, "cache_salt", "want a string"},
		{"response_format string", "/v1/chat/completions", m + `"response_format":"json"}`, "response_format", "object with a \"type\""},
		{"tools object", "/v1/chat/completions", m + `"tools":{"type":"function"}}`, "tools", "array of tool objects"},
		{"tool_choice number", "/v1/chat/completions", m + `"tool_choice":1}`, "tool_choice", "tool_choice must be"},
		{"presence_penalty", "/v1/completions", c + `"presence_penalty":3}`, "presence_penalty", "[-2, 2]"},
		{"logit_bias range", "/v1/completions", c + `"logit_bias":{"5":200}}`, "logit_bias", "[-100, 100]"},
		{"best_of below n", "/v1/completions", c + `"n":3,"best_of":2}`, "best_of", "at least n"},
		{"top_k", "/v1/completions", c + `"top_k":-2}`, "top_k", "top_k must be"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := h.do(t, "POST", tc.path, tc.body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", resp.StatusCode, body)
			}
			e := decodeError(t, body)
			if e.Param == nil || *e.Param != tc.param {
				t.Errorf("param %v, want %q", e.Param, tc.param)
			}
			if !bytes.Contains([]byte(e.Message), []byte(tc.msg)) {
				t.Errorf("message %q does not say %q", e.Message, tc.msg)
			}
		})
	}
	if n := len(w.received()); n != 0 {
		t.Errorf("invalid requests reached the worker %d times", n)
	}
}

func TestPlainHTTP(t *testing.T) {
	for _, c := range []struct{ url, addr, prefix string }{
		{"http://127.0.0.1:8001", "127.0.0.1:8001", ""},
		{"http://w1:8000/", "w1:8000", ""},
		{"http://w1:8000/engine/a/", "w1:8000", "/engine/a"},
		{"http://w1", "w1:80", ""},
		{"http://[::1]:9000", "[::1]:9000", ""},
		{"http://[::1]", "[::1]:80", ""},
	} {
		addr, prefix, ok := plainHTTP(c.url)
		if !ok || addr != c.addr || prefix != c.prefix {
			t.Errorf("plainHTTP(%q) = %q %q %v, want %q %q", c.url, addr, prefix, ok, c.addr, c.prefix)
		}
	}
	for _, u := range []string{"https://w1:8000", "http://user:pw@w1:8000", "http://w1:8000?x=1", "http://", "unix:///tmp/s"} {
		if _, _, ok := plainHTTP(u); ok {
			t.Errorf("plainHTTP(%q) took it; net/http should", u)
		}
	}
}
