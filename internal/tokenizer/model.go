package tokenizer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer/hf"
)

// Model is a model's tokenizer as the frontend and the simulator use it:
// prompts and chats to the token ids the engine computes, and back.
// cl100k (Cl100k) and a HuggingFace tokenizer.json (package hf) fit.
//
// Encode is the ids of text alone, with no special tokens added;
// EncodePrompt those of a completion prompt, with the special tokens the
// engine adds (Llama's <|begin_of_text|>); EncodeChat renders messages
// with the model's chat template and encodes the result.
type Model interface {
	Encoder
	// Name says which tokenizer this is: "cl100k_base", or a file path.
	Name() string
	// Decode is the text of ids.
	Decode(ids []uint32) string
	// VocabSize is one past the highest id.
	VocabSize() int
}

// ChatOptions are the chat-template switches of a request.
type ChatOptions = hf.ChatOptions

// DefaultChat opens the assistant's turn, as a chat completion does.
var DefaultChat = hf.DefaultChat

// ErrEngineTokenizer is returned by Open for "engine": tokenization is
// asked of a worker's engine, which the caller has to arrange.
var ErrEngineTokenizer = errors.New("tokenizer: \"engine\" tokenizes on a worker's engine")

// Cl100k is the built-in cl100k_base tokenizer as a Model, with the
// simple ChatML template of ChatPrompt.
type Cl100k struct {
	*Tokenizer
	// turns caches chat turns' encodings (see EncodeChat); nil encodes
	// every chat whole.
	turns *sectionCache
}

// NewCl100k is the process-wide cl100k tokenizer with a cache of chat
// turns of its own.
func NewCl100k() (Cl100k, error) {
	t, err := New()
	if err != nil {
		return Cl100k{}, err
	}
	return Cl100k{Tokenizer: t, turns: newSectionCache(sectionCacheBytes)}, nil
}

// Name implements Model.
func (Cl100k) Name() string { return Encoding }

// EncodePrompt implements Model: cl100k adds no special tokens.
func (c Cl100k) EncodePrompt(text string) []uint32 { return c.Encode(text) }

// EncodeChat implements Model with ChatPrompt, which always opens the
// assistant's turn.
//
// With a turn cache, each turn of the rendered prompt is encoded on its
// own, through the cache, so that the earlier turns of a growing
// conversation are looked up rather than encoded again. The ids are those
// of encoding the whole prompt: cl100k has no special tokens in ChatML
// (the markers are text to it), but no pre-tokenizer piece contains a
// newline followed by a character that is not white space, so the point
// after each turn's "<|im_end|>\n", where the next turn's "<" follows, is
// a piece boundary; the pieces before it are the same with or without the
// text after it (FuzzCl100kTurns holds the two encodings equal).
func (c Cl100k) EncodeChat(msgs []openai.Message, _ ChatOptions) ([]uint32, error) {
	if len(msgs) == 0 {
		return nil, errors.New("tokenizer: no messages")
	}
	s := ChatPrompt(msgs)
	if c.turns == nil {
		return c.Encode(s), nil
	}
	dst := make([]uint32, 0, len(s)/4+4)
	for s != "" {
		n := turnLen(s)
		dst = c.turns.appendSection(dst, s[:n], c.AppendEncode)
		s = s[n:]
	}
	return dst, nil
}

// turnEnd ends every turn ChatPrompt renders.
const turnEnd = "<|im_end|>\n"

// turnLen is the length of the first turn of a rendered prompt: through
// the first turnEnd that a "<" follows, or all of s.
func turnLen(s string) int {
	for off := 0; ; {
		i := strings.Index(s[off:], turnEnd)
		if i < 0 {
			return len(s)
		}
		end := off + i + len(turnEnd)
		if end < len(s) && s[end] == '<' {
			return end
		}
		off = end
	}
}

// CacheStats reports the turn cache's counters.
func (c Cl100k) CacheStats() CacheStats {
	if c.turns == nil {
		return CacheStats{}
	}
	return c.turns.stats()
}

// HF is a HuggingFace tokenizer.json as a Model. The chat template is
// recognised when it loads; ChatErr says why chats cannot be encoded (no
// template, or one not rendered here), so a server can refuse to start.
//
// Encode, EncodePrompt and EncodeChat go through a bounded cache of
// section encodings (see sectionCache), shared by copies of the HF: a
// conversation's turns already seen are not encoded again. The ids are
// those of hf.Tokenizer's methods, by construction.
type HF struct {
	*hf.Tokenizer
	chat     *hf.ChatTemplate
	chatErr  error
	sections *sectionCache
}

// Encode implements Model, through the section cache.
func (h HF) Encode(text string) []uint32 {
	return h.appendEncode(make([]uint32, 0, len(text)/4+8), text)
}

func (h HF) appendEncode(dst []uint32, text string) []uint32 {
	if h.sections == nil {
		return h.AppendEncode(dst, text)
	}
	return h.AppendEncodeSections(dst, text, func(dst []uint32, s string) []uint32 {
		return h.sections.appendSection(dst, s, h.AppendSection)
	})
}

// CacheStats reports the section cache's counters.
func (h HF) CacheStats() CacheStats {
	if h.sections == nil {
		return CacheStats{}
	}
	return h.sections.stats()
}

// ChatErr is nil when the tokenizer can encode chats.
func (h HF) ChatErr() error { return h.chatErr }

// Name implements Model.
func (h HF) Name() string { return h.Path() }

// EncodePrompt implements Model: the ids of hf's EncodeWithSpecial.
func (h HF) EncodePrompt(text string) []uint32 {
	prefix, suffix := h.PostProcess()
	dst := make([]uint32, 0, len(text)/4+8+len(prefix)+len(suffix))
	dst = append(dst, prefix...)
	dst = h.appendEncode(dst, text)
	return append(dst, suffix...)
}

// EncodeChat implements Model.
func (h HF) EncodeChat(msgs []openai.Message, o ChatOptions) ([]uint32, error) {
	if h.chatErr != nil {
		return nil, h.chatErr
	}
	s, err := h.chat.Render(msgs, o)
	if err != nil {
		return nil, err
	}
	return h.Encode(s), nil
}

// ChatFamily is the recognised chat template's family ("" without one).
func (h HF) ChatFamily() string {
	if h.chat == nil {
		return ""
	}
	return h.chat.Family
}

// Open resolves a --tokenizer value:
//   - "" or "cl100k": the built-in cl100k_base;
//   - "engine": ErrEngineTokenizer;
//   - a path to a tokenizer.json, or to the folder holding it and its
//     tokenizer_config.json;
//   - a HuggingFace model id (org/name), found in the local HuggingFace
//     cache ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub).
//     Nothing is downloaded.
func Open(spec string) (Model, error) {
	switch spec {
	case "", "cl100k", Encoding:
		c, err := NewCl100k()
		if err != nil {
			return nil, err
		}
		return c, nil
	case "engine":
		return nil, ErrEngineTokenizer
	}
	path, err := resolve(spec)
	if err != nil {
		return nil, err
	}
	t, err := hf.Load(path)
	if err != nil {
		return nil, err
	}
	chat, err := t.Chat()
	return HF{Tokenizer: t, chat: chat, chatErr: err, sections: newSectionCache(sectionCacheBytes)}, nil
}

// resolve finds the tokenizer.json a --tokenizer value names.
func resolve(spec string) (string, error) {
	if st, err := os.Stat(spec); err == nil {
		if st.IsDir() {
			p := filepath.Join(spec, "tokenizer.json")
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("tokenizer: %s has no tokenizer.json", spec)
			}
			return p, nil
		}
		return spec, nil
	}
	org, name, ok := strings.Cut(spec, "/")
	if !ok || org == "" || name == "" || strings.Contains(name, "/") || strings.HasPrefix(spec, ".") {
		return "", fmt.Errorf("tokenizer: %q is not a file, a folder, a HuggingFace model id (org/name), cl100k or engine", spec)
	}
	hub := HubCache()
	snaps := filepath.Join(hub, "models--"+org+"--"+name, "snapshots")
	// The snapshot refs/main points at, else any snapshot with the file.
	var candidates []string
	if ref, err := os.ReadFile(filepath.Join(hub, "models--"+org+"--"+name, "refs", "main")); err == nil {
		candidates = append(candidates, filepath.Join(snaps, strings.TrimSpace(string(ref))))
	}
	if ents, err := os.ReadDir(snaps); err == nil {
		for _, e := range ents {
			candidates = append(candidates, filepath.Join(snaps, e.Name()))
		}
	}
	for _, c := range candidates {
		p := filepath.Join(c, "tokenizer.json")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("tokenizer: model %s is not in the local HuggingFace cache (looked in %s); nothing is downloaded: fetch it on this host (huggingface-cli download %s tokenizer.json tokenizer_config.json), or pass the path to its tokenizer.json", spec, snaps, spec)
}

// HubCache is the HuggingFace hub cache folder: $HF_HUB_CACHE, else
// $HF_HOME/hub, else ~/.cache/huggingface/hub.
func HubCache() string {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub")
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "huggingface", "hub")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".cache", "huggingface", "hub")
	}
	return filepath.Join(home, ".cache", "huggingface", "hub")
}
