// Package enginetok tokenizes on the engines themselves: for
// `switchyard frontend --tokenizer engine`, each prompt or chat is sent to a
// worker's POST /tokenize (vLLM's API: prompt or messages in, tokens out),
// so the frontend's block hashes match the engine's KV events whatever the
// model, chat template included, with no tokenizer files on the frontend.
//
// Results are cached by the SHA-256 of the exact /tokenize body. That is
// sound because tokenization is a pure function of the body for one model,
// and a frontend serves one model (every worker it routes to was admitted
// for it); the body names the model, so a model change misses the cache.
//
// When no worker answers, a prompt gets no tokens: the request is still
// served, routed on load alone, and the failure is counted and logged at a
// limited rate. A Tokenizer is safe for concurrent use.
package enginetok

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// Config configures a Tokenizer.
type Config struct {
	// Model is sent in every request.
	Model string
	// Workers returns the base URLs of the workers that may be asked, in
	// any order; they are tried round-robin.
	Workers func() []string
	// Client defaults to one with Timeout.
	Client *http.Client
	// Timeout bounds one /tokenize call; 0 means 2 s.
	Timeout time.Duration
	// CacheEntries bounds the cache; 0 means 16384.
	CacheEntries int
	Logger       *slog.Logger
}

// Stats counts what a Tokenizer did.
type Stats struct {
	Calls    uint64 // /tokenize requests sent
	Hits     uint64 // answers from the cache
	Failures uint64 // texts left untokenized: no worker, or none answered
}

// Tokenizer implements tokenizer.Encoder on the engines.
type Tokenizer struct {
	cfg  Config
	next atomic.Uint64

	mu    sync.Mutex // guards cache and lru
	cache map[[32]byte]*list.Element
	lru   *list.List // of *entry, most recent first

	calls, hits, failures atomic.Uint64
	logMu                 sync.Mutex
	logLast               time.Time
}

type entry struct {
	key  [32]byte
	toks []uint32
}

var _ tokenizer.Encoder = (*Tokenizer)(nil)

// New returns a Tokenizer.
func New(cfg Config) (*Tokenizer, error) {
	if cfg.Workers == nil {
		return nil, errors.New("enginetok: no worker list")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.Timeout}
	}
	if cfg.CacheEntries <= 0 {
		cfg.CacheEntries = 16384
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Tokenizer{cfg: cfg, cache: make(map[[32]byte]*list.Element), lru: list.New()}, nil
}

// Name says where tokens come from.
func (t *Tokenizer) Name() string { return "engine (POST /tokenize on a worker)" }

// Stats returns the counters.
func (t *Tokenizer) Stats() Stats {
	return Stats{Calls: t.calls.Load(), Hits: t.hits.Load(), Failures: t.failures.Load()}
}

// Encode tokenizes text without special tokens.
func (t *Tokenizer) Encode(text string) []uint32 {
	f := false
	return t.tokenize(&openai.TokenizeRequest{Model: t.cfg.Model, Prompt: &text, AddSpecialTokens: &f})
}

// EncodePrompt tokenizes a completion prompt as the engine does (with its
// special tokens, vLLM's default).
func (t *Tokenizer) EncodePrompt(text string) []uint32 {
	tr := true
	return t.tokenize(&openai.TokenizeRequest{Model: t.cfg.Model, Prompt: &text, AddSpecialTokens: &tr})
}

// EncodeChat renders and tokenizes a chat with the engine's own template.
// An engine failure is not the client's: it returns no tokens and no error.
func (t *Tokenizer) EncodeChat(msgs []openai.Message, o tokenizer.ChatOptions) ([]uint32, error) {
	gen := o.AddGenerationPrompt
	req := &openai.TokenizeRequest{Model: t.cfg.Model, Messages: msgs, AddGenerationPrompt: &gen, ContinueFinalMessage: o.ContinueFinalMessage}
	if o.EnableThinking != nil {
		req.ChatTemplateKwargs = map[string]any{"enable_thinking": *o.EnableThinking}
	}
	return t.tokenize(req), nil
}

func (t *Tokenizer) tokenize(req *openai.TokenizeRequest) []uint32 {
	body, err := json.Marshal(req)
	if err != nil {
		t.fail(err)
		return nil
	}
	key := sha256.Sum256(body)
	t.mu.Lock()
	if el, ok := t.cache[key]; ok {
		t.lru.MoveToFront(el)
		toks := el.Value.(*entry).toks
		t.mu.Unlock()
		t.hits.Add(1)
		return toks
	}
	t.mu.Unlock()
	urls := t.cfg.Workers()
	if len(urls) == 0 {
		t.fail(errors.New("no worker to ask"))
		return nil
	}
	var toks []uint32
	for try := 0; try < min(2, len(urls)); try++ {
		u := urls[int(t.next.Add(1)%uint64(len(urls)))]
		if toks, err = t.call(u, body); err == nil {
			break
		}
	}
	if err != nil {
		t.fail(err)
		return nil
	}
	t.mu.Lock()
	if _, ok := t.cache[key]; !ok {
		t.cache[key] = t.lru.PushFront(&entry{key: key, toks: toks})
		for t.lru.Len() > t.cfg.CacheEntries {
			old := t.lru.Remove(t.lru.Back()).(*entry)
			delete(t.cache, old.key)
		}
	}
	t.mu.Unlock()
	return toks
}

func (t *Tokenizer) call(base string, body []byte) ([]uint32, error) {
	t.calls.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.Timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/tokenize", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.cfg.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST %s/tokenize: %s: %.200s", base, resp.Status, data)
	}
	var out struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("POST %s/tokenize: %w", base, err)
	}
	return out.Tokens, nil
}

func (t *Tokenizer) fail(err error) {
	t.failures.Add(1)
	t.logMu.Lock()
	defer t.logMu.Unlock()
	if time.Since(t.logLast) < 10*time.Second {
		return
	}
	t.logLast = time.Now()
	t.cfg.Logger.Warn("engine tokenizer: request routed without prefix matching", "err", err)
}
