package openai

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestMessageContent(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     string
		partType string // a *ContentPartError with this type is expected
		wantErr  bool
	}{
		{"string", `{"role":"user","content":"hi"}`, "hi", "", false},
		{"null", `{"role":"assistant","content":null}`, "", "", false},
		{"missing", `{"role":"assistant"}`, "", "", false},
		{"one text part", `{"role":"user","content":[{"type":"text","text":"hello"}]}`, "hello", "", false},
		{"text parts joined", `{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`, "a\nb", "", false},
		{"empty parts", `{"role":"user","content":[]}`, "", "", false},
		{"image part", `{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}`, "", "image_url", false},
		{"untyped part", `{"role":"user","content":[{"text":"a"}]}`, "", "", true},
		{"text part without text", `{"role":"user","content":[{"type":"text"}]}`, "", "", true},
		{"number", `{"role":"user","content":5}`, "", "", true},
		{"array of strings", `{"role":"user","content":["a"]}`, "", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m Message
			err := json.Unmarshal([]byte(tc.in), &m)
			var pe *ContentPartError
			switch {
			case tc.partType != "":
				if !errors.As(err, &pe) || pe.Type != tc.partType {
					t.Errorf("err = %v, want a ContentPartError for %q", err, tc.partType)
				}
			case tc.wantErr:
				if err == nil {
					t.Errorf("decoded %+v, want an error", m)
				}
			case err != nil:
				t.Errorf("err = %v", err)
			case m.Content != tc.want || m.Role == "":
				t.Errorf("got %+v, want content %q", m, tc.want)
			}
		})
	}
}

func TestMessageContentInRequest(t *testing.T) {
	var req CompletionRequest
	err := json.Unmarshal([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio"}]}]}`), &req)
	var pe *ContentPartError
	if !errors.As(err, &pe) || pe.Type != "input_audio" {
		t.Fatalf("err = %v, want a ContentPartError naming input_audio", err)
	}
	// Encoding always writes a string.
	b, _ := json.Marshal(Message{Role: "user", Content: "x"})
	if string(b) != `{"role":"user","content":"x"}` {
		t.Errorf("encoded %s", b)
	}
}

func TestPromptErrors(t *testing.T) {
	for _, body := range []string{`{"prompt":["a","b"]}`, `{"prompt":{"x":1}}`, `{"prompt":[1,"a"]}`} {
		var r CompletionRequest
		err := json.Unmarshal([]byte(body), &r)
		var pe *PromptError
		if !errors.As(err, &pe) || pe.Msg == "" {
			t.Errorf("%s: err %v, want a PromptError", body, err)
		}
	}
}

func TestCheckRoles(t *testing.T) {
	if err := CheckRoles([]Message{{Role: "system"}, {Role: "user"}, {Role: "assistant"}, {Role: "tool"}}); err != nil {
		t.Errorf("valid roles: %v", err)
	}
	if err := CheckRoles([]Message{{Role: "user"}, {Role: "bogus"}}); err == nil || !strings.Contains(err.Error(), "messages[1]") {
		t.Errorf("bogus role: %v, want an error naming messages[1]", err)
	}
}
