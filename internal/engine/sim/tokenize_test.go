package sim

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// TestTokenize: POST /tokenize answers {count, max_model_len, tokens} as
// vLLM does, with the ids the worker itself prefills for the same chat.
func TestTokenize(t *testing.T) {
	w, srv := startWorker(t, Config{})
	post := func(body string) (int, openai.TokenizeResponse) {
		resp, err := http.Post(srv.URL+"/tokenize", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out openai.TokenizeResponse
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	code, got := post(`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there"}]}`)
	want := w.tok.Encode(tokenizer.ChatPrompt([]openai.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hello there"}}))
	if code != 200 || got.Count != len(want) || !reflect.DeepEqual(got.Tokens, want) || got.MaxModelLen != w.maxLen {
		t.Errorf("chat: %d %+v, want %v and max_model_len %d", code, got, want, w.maxLen)
	}
	if code, got := post(`{"prompt":"Hello there"}`); code != 200 || got.Count != 2 {
		t.Errorf("prompt: %d %+v", code, got)
	}
	if code, _ := post(`{"prompt":"x","model":"other"}`); code != http.StatusNotFound {
		t.Errorf("other model: %d", code)
	}
	if code, _ := post(`{"prompt":`); code != http.StatusBadRequest {
		t.Errorf("bad JSON: %d", code)
	}
}

// TestChatTemplateSwitches: the simulator takes vLLM's chat-template
// fields and refuses template kwargs it cannot render.
func TestChatTemplateSwitches(t *testing.T) {
	_, srv := startWorker(t, Config{})
	for body, want := range map[string]int{
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"chat_template_kwargs":{"enable_thinking":false}}`:                                                 200,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"chat_template_kwargs":{"tools_mode":1}}`:                                                          400,
		`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hel"}],"max_tokens":2,"continue_final_message":true,"add_generation_prompt":false}`: 200,
	} {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: status %d, want %d", body, resp.StatusCode, want)
		}
	}
}
