package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

func TestTokenizeCommand(t *testing.T) {
	const tiny = "../tokenizer/testdata/tiny-qwen3"
	m, err := tokenizer.Open(tiny)
	if err != nil {
		t.Fatal(err)
	}
	run := func(stdin string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), append([]string{"tokenize"}, args...), strings.NewReader(stdin), &out, &errb)
		return code, out.String(), errb.String()
	}
	var got struct {
		Count     int
		Tokens    []uint32
		TokenStrs []string `json:"token_strs"`
	}
	code, out, errs := run(`[{"role":"user","content":"hello world"}]`, "--tokenizer", tiny, "--messages", "--strings", "--enable-thinking=false")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	off := false
	want, _ := m.EncodeChat([]openai.Message{{Role: "user", Content: "hello world"}}, tokenizer.ChatOptions{AddGenerationPrompt: true, EnableThinking: &off})
	if got.Count != len(want) || strings.Join(got.TokenStrs, "") != m.Decode(want) {
		t.Errorf("got %+v, want %v", got, want)
	}
	if code, out, _ := run("hello", "--tokenizer", tiny, "--add-special-tokens=false"); code != 0 || !strings.Contains(out, `"tokens":[`) {
		t.Errorf("text: %d %s", code, out)
	}
	for _, c := range []struct {
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"x", []string{"--tokenizer", "missing/model"}, ExitFail, "not in the local HuggingFace cache"},
		{"not json", []string{"--messages"}, ExitUsage, "not a JSON array of messages"},
		{"[]", []string{"--messages"}, ExitFail, "prompt or messages is required"},
		{"x", []string{"--tokenizer", "engine"}, ExitFail, "--tokenizer engine is not available"},
	} {
		code, _, errs := run(c.stdin, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
}

// TestServersRefuseTokenizerWithoutTemplate: frontend, up and worker need
// chats, so a tokenizer.json without a chat template stops them at start;
// `tokenize` still encodes text with it.
func TestServersRefuseTokenizerWithoutTemplate(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("../tokenizer/testdata/tiny-qwen3/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openTokenizer(dir); err == nil || !strings.Contains(err.Error(), "no chat_template") {
		t.Errorf("openTokenizer: %v", err)
	}
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"tokenize", "--tokenizer", dir}, strings.NewReader("hello"), &out, &errb); code != 0 {
		t.Errorf("tokenize text: exit %d: %s", code, errb.String())
	}
}
