package tokenizer

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

const tinyDir = "testdata/tiny-qwen3"

func TestOpen(t *testing.T) {
	for _, spec := range []string{"", "cl100k", "cl100k_base"} {
		m, err := Open(spec)
		if err != nil || m.Name() != Encoding {
			t.Errorf("Open(%q) = %v, %v", spec, m, err)
		}
	}
	if _, err := Open("engine"); !errors.Is(err, ErrEngineTokenizer) {
		t.Errorf("Open(engine) = %v", err)
	}
	for _, spec := range []string{tinyDir, filepath.Join(tinyDir, "tokenizer.json")} {
		m, err := Open(spec)
		if err != nil {
			t.Fatalf("Open(%s): %v", spec, err)
		}
		if got := m.Decode(m.Encode("hello world")); got != "hello world" {
			t.Errorf("%s: round trip %q", spec, got)
		}
	}
	for spec, want := range map[string]string{
		"no/such-model":     "not in the local HuggingFace cache",
		"./nope":            "is not a file, a folder",
		t.TempDir():         "has no tokenizer.json",
		"a/b/c/tokenizer.x": "is not a file, a folder",
	} {
		if _, err := Open(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) = %v, want %q", spec, err, want)
		}
	}
}

// TestOpenHubCache resolves a model id in a HuggingFace cache layout,
// preferring the snapshot refs/main names.
func TestOpenHubCache(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_HUB_CACHE", "")
	repo := filepath.Join(home, "hub", "models--Qwen--Tiny")
	for _, rev := range []string{"aaa", "bbb"} {
		dir := filepath.Join(repo, "snapshots", rev)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
			data, err := os.ReadFile(filepath.Join(tinyDir, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(repo, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "refs", "main"), []byte("bbb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Open("Qwen/Tiny")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(repo, "snapshots", "bbb", "tokenizer.json"); m.Name() != want {
		t.Errorf("resolved %s, want %s", m.Name(), want)
	}
}

func TestTokenize(t *testing.T) {
	m, err := Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	text := "hello"
	no := false
	msgs := []openai.Message{{Role: "user", Content: "hello"}}
	chat, err := m.EncodeChat(msgs, DefaultChat)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Decode(chat); got != "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n" {
		t.Errorf("chat renders %q", got)
	}
	off := false
	for _, c := range []struct {
		req  openai.TokenizeRequest
		want []uint32
		err  string
	}{
		{req: openai.TokenizeRequest{Prompt: &text}, want: m.EncodePrompt(text)},
		{req: openai.TokenizeRequest{Prompt: &text, AddSpecialTokens: &no}, want: m.Encode(text)},
		{req: openai.TokenizeRequest{Messages: msgs}, want: chat},
		{req: openai.TokenizeRequest{Messages: msgs, ChatTemplateKwargs: map[string]any{"enable_thinking": false}},
			want: m.Encode("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")},
		{req: openai.TokenizeRequest{Messages: msgs, AddGenerationPrompt: &off}, want: m.Encode("<|im_start|>user\nhello<|im_end|>\n")},
		{req: openai.TokenizeRequest{Messages: msgs, ChatTemplateKwargs: map[string]any{"tools_on": true}}, err: "chat_template_kwargs.tools_on"},
		{req: openai.TokenizeRequest{}, err: "prompt or messages is required"},
		{req: openai.TokenizeRequest{Prompt: &text, Messages: msgs}, err: "not both"},
	} {
		got, err := Tokenize(m, &c.req)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: err %v, want %q", c.req, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v: %v %v, want %v", c.req, got, err, c.want)
		}
	}
	// The tiny tokenizer's TemplateProcessing puts <|end|> first.
	if got := m.EncodePrompt("hello"); len(got) != 2 || got[0] != 1000 {
		t.Errorf("EncodePrompt = %v, want the template's <|end|> (1000) first", got)
	}
}

// TestOpenWithoutChatTemplate: a bare tokenizer.json encodes text, and
// says why it cannot encode a chat.
func TestOpenWithoutChatTemplate(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(tinyDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Decode(m.Encode("hello")); got != "hello" {
		t.Errorf("text: %q", got)
	}
	_, err = m.EncodeChat([]openai.Message{{Role: "user", Content: "hi"}}, DefaultChat)
	if err == nil || !strings.Contains(err.Error(), "no chat_template") || m.(HF).ChatErr() == nil {
		t.Errorf("chat without a template: %v", err)
	}
}
