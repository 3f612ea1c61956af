package sim

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// Worker is a simulated engine with its HTTP API. Create it with NewWorker,
// serve Handler, and run the scheduler with Run(ctx); many Workers can share
// one process.
type Worker struct {
	*Engine
	tok   tokenizer.Model
	reqID atomic.Uint64
	loras *loraSlots

	adMu     sync.RWMutex  // guards adapters
	adapters []bus.Adapter // served now: Config.Adapters, then as loaded and unloaded
	// stored holds the conversations of stored responses, for
	// previous_response_id.
	stored *conversations
}

// NewWorker validates cfg, sizes the KV cache and builds the worker. It
// starts no goroutine: call Run.
func NewWorker(cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tok := cfg.Tokenizer
	if tok == nil {
		t, err := tokenizer.New()
		if err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
		tok = tokenizer.Cl100k{Tokenizer: t}
	}
	words, err := wordsFor(tok)
	if err != nil {
		return nil, err
	}
	e, err := newEngine(cfg, words)
	if err != nil {
		return nil, err
	}
	e.metrics = newMetrics(e)
	w := &Worker{Engine: e, tok: tok, stored: newConversations(maxStoredResponses), adapters: slices.Clone(cfg.Adapters)}
	// Adapters may be loaded at run time, so the slots always exist; the
	// metric shows only while some adapter is served, as vLLM's only with
	// LoRA enabled.
	w.loras = newLoRASlots(cfg.MaxLoRAs, cfg.LoRASwap, cfg.Speedup)
	e.metrics.reg.MustRegister(&loraInfoCollector{w: w, desc: loraInfoDesc(prometheus.Labels{"model_name": cfg.Model, "engine": cfg.ID})})
	return w, nil
}

// Config returns the worker's configuration with defaults filled in and the
// TP degree resolved.
func (w *Worker) Config() Config { return w.cfg }

// Info is the worker's registry entry, less what only the caller knows
// (HTTPURL, Epoch, KVEventsEnabled, StartedUnixMilli).
func (w *Worker) Info() bus.WorkerInfo {
	return bus.WorkerInfo{
		ID:              w.cfg.ID,
		Role:            w.cfg.Role,
		Model:           w.servedName(),
		Aliases:         w.aliases(),
		Adapters:        w.adapterList(),
		KVXferAddr:      w.cfg.KVXferAddr,
		BlockSize:       w.bs,
		KVBytesPerToken: w.model.KVBytesPerToken(),
		KVBlocks:        w.bm.total(),
		MaxModelLen:     w.maxLen,
		Profile:         w.profile,
		APIs:            []string{"messages", "responses", "embeddings"},
	}
}

// servedName is the name the worker registers its model under.
func (w *Worker) servedName() string {
	if len(w.cfg.ServedNames) > 0 {
		return w.cfg.ServedNames[0]
	}
	return w.cfg.Model
}

func (w *Worker) aliases() []string {
	if len(w.cfg.ServedNames) < 2 {
		return nil
	}
	return slices.Clone(w.cfg.ServedNames[1:])
}

// resolveModel says whether the worker serves name and, when name is a LoRA
// adapter, which (for a base model or alias, "").
func (w *Worker) resolveModel(name string) (adapter string, ok bool) {
	if name == "" || name == w.servedName() || slices.Contains(w.aliases(), name) {
		return "", true
	}
	w.adMu.RLock()
	defer w.adMu.RUnlock()
	return w.resolveModelLocked(name)
}

// resolveModelLocked is resolveModel with adMu held.
func (w *Worker) resolveModelLocked(name string) (adapter string, ok bool) {
	if name == "" || name == w.servedName() || slices.Contains(w.aliases(), name) {
		return "", true
	}
	if slices.ContainsFunc(w.adapters, func(a bus.Adapter) bool { return a.Name == name }) {
		return name, true
	}
	return "", false
}

// adapterList is a copy of the adapters served now.
func (w *Worker) adapterList() []bus.Adapter {
	w.adMu.RLock()
	defer w.adMu.RUnlock()
	return slices.Clone(w.adapters)
}
