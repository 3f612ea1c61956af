package sim

import (
	"fmt"
	"sync/atomic"

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
	return &Worker{Engine: e, tok: tok}, nil
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
		Model:           w.cfg.Model,
		KVXferAddr:      w.cfg.KVXferAddr,
		BlockSize:       w.bs,
		KVBytesPerToken: w.model.KVBytesPerToken(),
		KVBlocks:        w.bm.total(),
		MaxModelLen:     w.maxLen,
		Profile:         w.profile,
	}
}
