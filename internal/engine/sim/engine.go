package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/perfmodel"
)

// Errors a submission can fail with; the HTTP layer maps them to 400.
var (
	ErrNeverFits     = errors.New("sim: request can never fit in the KV cache")
	ErrContextLength = errors.New("sim: request exceeds the maximum model length")
	ErrEmptyPrompt   = errors.New("sim: prompt is empty")
	ErrStopped       = errors.New("sim: engine stopped")
)

// Request is one generation request in tokens.
type Request struct {
	ID     string
	Tokens []uint32 // the prompt
	Salt   string   // cache_salt: seeds the block-hash chain
	// MaxTokens is how many tokens to generate; the request then finishes
	// with "length". Zero means "until the natural stop", a deterministic
	// length of 16-256 tokens that finishes with "stop".
	MaxTokens int
	MinTokens int    // the natural stop comes no earlier than this
	IgnoreEOS bool   // no natural stop: without MaxTokens, run to the model length
	Seed      *int64 // generation seed; nil derives it from the prompt
	// Pin keeps the prompt's full blocks referenced after the request
	// finishes (prefill role); Result.Pinned then releases them.
	Pin bool
}

// Result is what a finished request produced, with its simulated timings.
type Result struct {
	Output       []uint32
	FinishReason string // "stop" or "length"
	PromptTokens int
	CachedTokens int // prompt tokens found in the prefix cache when first scheduled
	Queue        time.Duration
	Prefill      time.Duration // first scheduled → first token
	TTFT         time.Duration
	E2E          time.Duration
	Preemptions  int
	Pinned       *PinnedSet // non-nil only for Pin requests
}

// PinnedSet is a finished prefill's blocks, kept referenced until Release.
type PinnedSet struct {
	Parent uint64   // chain parent of Hashes[0]: kvindex.Root(salt)
	Hashes []uint64 // in chain order
	e      *Engine
	blocks []int32
	once   sync.Once
}

// Release drops the pins. Safe to call more than once.
func (p *PinnedSet) Release() {
	p.once.Do(func() {
		p.e.mu.Lock()
		defer p.e.mu.Unlock()
		for _, b := range p.blocks {
			p.e.bm.release(b)
		}
		p.e.signal()
	})
}

// Load is a snapshot of the engine's queue and cache state.
type Load struct {
	Running             int
	Waiting             int
	QueuedPrefillTokens int // prompt tokens not yet computed, waiting and running
	ActiveDecodeBlocks  int // blocks held by running sequences
	KVUsage             float64
	UsedBlocks          int
	TotalBlocks         int
	SimTime             time.Duration
}

type seqState uint8

const (
	stateWaiting seqState = iota
	stateRunning
	stateDone
)

// seq is a request inside the engine. The engine's mutex guards it.
type seq struct {
	req       Request
	tokens    []uint32 // prompt, then generated tokens
	promptLen int
	limit     int    // tokens to generate
	finish    string // finish reason once limit is reached
	genSeed   uint64
	hashes    []uint64 // chained hashes of the full blocks of tokens, as far as computed
	blocks    []int32
	computed  int // tokens whose KV is in blocks
	committed int // leading blocks committed to the prefix cache
	state     seqState

	cached      int
	everRun     bool
	preemptions int
	arrival     time.Duration
	scheduled   time.Duration
	firstToken  time.Duration
	lastToken   time.Duration
	finishedAt  time.Duration
	pinned      *PinnedSet

	// Delivery: the reader sees outputs up to visible, after the step's
	// simulated duration has passed on the wall clock.
	visible     int
	visibleDone bool
	err         error
	notify      chan struct{}
}

func (s *seq) outputs() int { return len(s.tokens) - s.promptLen }

// Engine is the scheduler, block manager and clock of one simulated worker.
type Engine struct {
	cfg       Config
	model     perfmodel.Model
	profile   bus.Profile
	bs        int
	maxLen    int
	words     []uint32
	metrics   *metrics
	wake      chan struct{}
	startWall time.Time

	mu         sync.Mutex // guards everything below, and every seq
	bm         *blockManager
	waiting    []*seq
	running    []*seq
	clock      time.Duration // simulated time since start
	busy       bool
	wallAnchor time.Time
	simAnchor  time.Duration
	stopped    bool
	steps      uint64
}

func newEngine(cfg Config, words []uint32) (*Engine, error) {
	m, err := perfmodel.LookupModel(cfg.Model)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	g, err := perfmodel.LookupGPU(cfg.GPU)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	tp := cfg.TP
	if tp == 0 {
		if tp, err = perfmodel.DefaultTP(m, g, cfg.GPUMemoryUtilization); err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
	}
	cfg.TP = tp
	blocks := cfg.KVBlocks
	if blocks == 0 {
		capacity := perfmodel.KVCapacityBytes(m, g, tp, cfg.GPUMemoryUtilization)
		blocks = int(capacity / float64(m.KVBytesPerToken()*cfg.BlockSize))
		if blocks < 1 {
			return nil, fmt.Errorf("sim: %s on %d × %s leaves no memory for the KV cache; raise --tp or --gpu-memory-utilization, or set --kv-blocks", m.Name, tp, g.Name)
		}
	}
	p := perfmodel.NewProfile(m, g, tp)
	p.MaxBatchTokens = cfg.MaxNumBatchedTokens
	p.Speedup = cfg.Speedup
	now := time.Now()
	return &Engine{
		cfg:        cfg,
		model:      m,
		profile:    p,
		bs:         cfg.BlockSize,
		maxLen:     min(m.MaxModelLen, blocks*cfg.BlockSize),
		words:      words,
		wake:       make(chan struct{}, 1),
		startWall:  now,
		bm:         newBlockManager(blocks),
		wallAnchor: now,
	}, nil
}

// Profile is this worker's timing profile for the registry.
func (e *Engine) Profile() bus.Profile { return e.profile }

// MaxModelLen is the longest prompt plus output the worker accepts: the
// model's limit, or the KV cache's if smaller.
func (e *Engine) MaxModelLen() int { return e.maxLen }

// BlockSize is the number of tokens per KV block.
func (e *Engine) BlockSize() int { return e.bs }

// TotalBlocks is the KV cache size in blocks.
func (e *Engine) TotalBlocks() int { return e.bm.total() }

// KVBytesPerToken is the model's KV footprint per token over all TP ranks.
func (e *Engine) KVBytesPerToken() int { return e.model.KVBytesPerToken() }

// BlockBytes is the payload size of one block.
func (e *Engine) BlockBytes() int { return e.bs * e.model.KVBytesPerToken() }

// PrefillTime predicts the simulated time to prefill newTokens after
// cachedTokens, alone on this worker.
func (e *Engine) PrefillTime(newTokens, cachedTokens int) time.Duration {
	return perfmodel.PrefillTime(&e.profile, newTokens, cachedTokens)
}

// Load returns a snapshot of the queues and cache.
func (e *Engine) Load() Load {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := Load{
		Running:     len(e.running),
		Waiting:     len(e.waiting),
		UsedBlocks:  e.bm.used,
		TotalBlocks: e.bm.total(),
		SimTime:     e.clock,
	}
	l.KVUsage = float64(l.UsedBlocks) / float64(l.TotalBlocks)
	for _, s := range e.waiting {
		l.QueuedPrefillTokens += len(s.tokens) - s.computed
	}
	for _, s := range e.running {
		if s.computed < len(s.tokens)-1 {
			l.QueuedPrefillTokens += len(s.tokens) - s.computed
		}
		l.ActiveDecodeBlocks += len(s.blocks)
	}
	return l
}

// SnapshotBlocks calls fn with every cached block hash, holding the lock
// under which events are published: no step's events can be published
// between the snapshot and fn's return. fn must not call the engine.
func (e *Engine) SnapshotBlocks(fn func(hashes []uint64)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fn(e.bm.cachedHashes())
}

// ResetPrefixCache drops every unreferenced cached block and publishes the
// resulting event. It returns how many blocks it dropped.
func (e *Engine) ResetPrefixCache() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.bm.clearUnreferenced()
	e.publish()
	return n
}

// Stopped reports whether the engine has stopped (Run returned); a stopped
// engine refuses new requests.
func (e *Engine) Stopped() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopped
}

// CachedPrefix returns how many leading blocks of the chain hashes are in
// the cache now.
func (e *Engine) CachedPrefix(hashes []uint64) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bm.prefixLen(hashes)
}

// InsertBlocks stores blocks received from another worker as computed,
// unreferenced cache entries: hashes is a chain continuing from parent. It
// publishes their Stored events. Blocks already cached are kept. It fails
// when the cache has no block to spare; the blocks inserted before stay.
func (e *Engine) InsertBlocks(parent uint64, hashes []uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	defer e.publish()
	for _, h := range hashes {
		if _, ok := e.bm.byHash[h]; !ok {
			i, ok := e.bm.allocate()
			if !ok {
				return fmt.Errorf("sim: insert block %016x: every KV block is in use", h)
			}
			e.bm.commit(i, parent, h)
			e.bm.release(i)
		}
		parent = h
	}
	return nil
}

// publish hands the pending events to the publisher. Callers hold e.mu.
func (e *Engine) publish() {
	if len(e.bm.events) == 0 {
		return
	}
	ev := e.bm.takeEvents()
	if e.cfg.Publisher != nil {
		e.cfg.Publisher.PublishStep(ev)
	}
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Submit queues a request. The returned Stream yields its tokens; the
// caller must Close it.
func (e *Engine) Submit(req Request) (*Stream, error) {
	n := len(req.Tokens)
	if n == 0 {
		return nil, ErrEmptyPrompt
	}
	limit, finish := req.MaxTokens, "length"
	var genSeed uint64
	if req.Seed != nil {
		genSeed = splitmix64(uint64(*req.Seed))
	} else {
		genSeed = kvindex.HashBlock(uint64(e.cfg.Seed), req.Tokens)
	}
	if limit <= 0 {
		limit, finish = max(naturalLength(genSeed), req.MinTokens), "stop"
		if req.IgnoreEOS {
			limit, finish = e.maxLen-n, "length"
		}
		limit = max(1, min(limit, e.maxLen-n))
	}
	if req.Pin {
		limit, finish = 1, "length"
	}
	if err := e.checkLength(n, limit); err != nil {
		return nil, err
	}
	s := &seq{
		req:       req,
		tokens:    append(make([]uint32, 0, n+limit), req.Tokens...),
		promptLen: n,
		limit:     limit,
		finish:    finish,
		genSeed:   genSeed,
		notify:    make(chan struct{}, 1),
	}
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return nil, ErrStopped
	}
	if !e.busy {
		// Idle: the simulated clock catches up with the wall clock.
		now := time.Now()
		e.clock = max(e.clock, e.simAnchor+time.Duration(float64(now.Sub(e.wallAnchor))*e.cfg.Speedup))
		e.wallAnchor, e.simAnchor = now, e.clock
		e.busy = true
	}
	s.arrival = e.clock
	e.waiting = append(e.waiting, s)
	e.mu.Unlock()
	e.signal()
	return &Stream{e: e, s: s}, nil
}

// Generate runs a request to completion. Cancelling ctx aborts it and frees
// its blocks.
func (e *Engine) Generate(ctx context.Context, req Request) (Result, error) {
	st, err := e.Submit(req)
	if err != nil {
		return Result{}, err
	}
	defer st.Close()
	for {
		_, done, err := st.Next(ctx)
		if err != nil {
			return Result{}, err
		}
		if done {
			return st.Result(), nil
		}
	}
}

// Stream is a submitted request's output. Not safe for concurrent use.
type Stream struct {
	e    *Engine
	s    *seq
	read int
}

// Next waits for tokens the request has produced since the last call.
// done is true once the request has finished and every token was returned.
// If ctx ends first the request is aborted and ctx's error returned.
func (st *Stream) Next(ctx context.Context) (tokens []uint32, done bool, err error) {
	s := st.s
	for {
		st.e.mu.Lock()
		if s.visible > st.read {
			tokens = slices.Clone(s.tokens[s.promptLen+st.read : s.promptLen+s.visible])
			st.read = s.visible
			done = s.visibleDone
			st.e.mu.Unlock()
			return tokens, done, nil
		}
		if s.visibleDone {
			err := s.err
			st.e.mu.Unlock()
			return nil, err == nil, err
		}
		st.e.mu.Unlock()
		select {
		case <-ctx.Done():
			st.Close()
			return nil, false, ctx.Err()
		case <-s.notify:
		}
	}
}

// Result returns the finished request's result; call it after Next reported
// done.
func (st *Stream) Result() Result {
	st.e.mu.Lock()
	defer st.e.mu.Unlock()
	s := st.s
	r := Result{
		Output:       slices.Clone(s.tokens[s.promptLen:]),
		FinishReason: s.finish,
		PromptTokens: s.promptLen,
		CachedTokens: s.cached,
		Queue:        s.scheduled - s.arrival,
		Prefill:      s.firstToken - s.scheduled,
		TTFT:         s.firstToken - s.arrival,
		E2E:          s.finishedAt - s.arrival,
		Preemptions:  s.preemptions,
		Pinned:       s.pinned,
	}
	return r
}

// Close aborts the request if it has not finished, freeing its blocks.
func (st *Stream) Close() {
	e, s := st.e, st.s
	e.mu.Lock()
	defer e.mu.Unlock()
	switch s.state {
	case stateWaiting:
		e.waiting = slices.DeleteFunc(e.waiting, func(x *seq) bool { return x == s })
	case stateRunning:
		e.running = slices.DeleteFunc(e.running, func(x *seq) bool { return x == s })
		e.freeBlocks(s)
	case stateDone:
		return
	}
	s.state = stateDone
	s.visibleDone = true
	if s.err == nil {
		s.err = context.Canceled
	}
	e.metrics.aborted()
}

// freeBlocks releases a sequence's blocks, last first, so that the tail of
// a prefix is evicted before its head. Callers hold e.mu.
func (e *Engine) freeBlocks(s *seq) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		e.bm.release(s.blocks[i])
	}
	s.blocks = s.blocks[:0]
	s.computed, s.committed = 0, 0
}

// checkLength rejects a request whose prompt and output can never be held:
// beyond the KV cache (every token but the last generated one needs its KV
// at once), or beyond the model's context.
//
// output comes from the client and may be as large as math.MaxInt, so the
// sums are taken in uint64 (prompt and output are both non-negative and at
// most math.MaxInt, so they cannot wrap there) rather than int, whose
// overflow once let 2^63−1 through to a make() that panicked.
func (e *Engine) checkLength(prompt, output int) error {
	total := uint64(prompt) + uint64(output)
	if need := (total - 1 + uint64(e.bs) - 1) / uint64(e.bs); need > uint64(e.bm.total()) {
		return fmt.Errorf("%w: %d prompt + %d output tokens need %d blocks of %d tokens, the cache has %d",
			ErrNeverFits, prompt, output, need, e.bs, e.bm.total())
	}
	if total > uint64(e.model.MaxModelLen) {
		return fmt.Errorf("%w: %d prompt + %d output tokens > %d", ErrContextLength, prompt, output, e.model.MaxModelLen)
	}
	return nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// simToWall converts a simulated duration to wall time.
func (e *Engine) simToWall(d time.Duration) time.Duration {
	return time.Duration(math.Round(float64(d) / e.cfg.Speedup))
}
