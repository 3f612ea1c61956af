package tokenizer

import (
	"testing"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

func TestRoundTrip(t *testing.T) {
	tk, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"", "hello world", "Ünïcödé and 数字 123", "<|endoftext|> is text here"} {
		ids := tk.Encode(s)
		if got := tk.Decode(ids); got != s {
			t.Errorf("Decode(Encode(%q)) = %q", s, got)
		}
	}
	if n := len(tk.Encode("hello world")); n != 2 {
		t.Errorf("len(Encode(hello world)) = %d, want 2 (cl100k_base)", n)
	}
}

func TestChatPrompt(t *testing.T) {
	got := ChatPrompt([]openai.Message{{Role: "user", Content: "hi"}})
	want := "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Errorf("ChatPrompt = %q, want %q", got, want)
	}
}
