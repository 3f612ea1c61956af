package sim

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/internal/kvevents"
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
	// Hashes, if set, are the prompt's full-block hashes as
	// kvindex.HashChain(nil, Salt, Tokens, block size) computes them: a
	// caller that has them (the simulator, which routed on them) spares
	// the engine hashing the prompt again. They are copied.
	Hashes []uint64
	// MaxTokens is how many tokens to generate; the request then finishes
	// with "length". Zero means "until the natural stop", a deterministic
	// length of 16-256 tokens that finishes with "stop".
	MaxTokens int
	MinTokens int    // the natural stop comes no earlier than this
	IgnoreEOS bool   // no natural stop: without MaxTokens, run to the model length
	Seed      *int64 // generation seed; nil derives it from the prompt
	// Choice numbers the sibling requests of one n > 1 request; each
	// choice > 0 generates its own text from the same seed.
	Choice int
	// Stop, if set, is called with the output so far after each token from
	// MinTokens on; true finishes the request with "stop" (a matched stop
	// sequence). It runs on the engine's goroutine with its lock held, so
	// it must be quick and must not call into the engine.
	Stop func(output []uint32) bool
	// Pin keeps the prompt's full blocks referenced after the request
	// finishes (prefill role); Result.Pinned then releases them.
	Pin bool
	// Tag is the caller's reference, handed back by Handle.Tag; the engine
	// does not use it.
	Tag int
	// QueuedAt, when positive and before the request's arrival, is the
	// simulated time it took its place in the waiting queue: a decode leg
	// whose remote prefill's KV was pulled before it was added. vLLM queues
	// such a request when the decode leg arrives and skips it while the
	// pull runs (WAITING_FOR_REMOTE_KVS) without losing its place, so the
	// requests that arrived during the pull wait behind it. Zero: its
	// arrival.
	QueuedAt time.Duration
}

// Result is what a finished request produced, with its simulated timings.
type Result struct {
	Output       []uint32
	FinishReason string // "stop" or "length"
	PromptTokens int
	CachedTokens int // prompt tokens found in the prefix cache when first scheduled, in any tier
	// TierTokens splits CachedTokens by the tier they came from (GPU, CPU,
	// disk); lower-tier tokens were loaded, not recomputed.
	TierTokens [kvevents.NumTiers]int
	// Load is the simulated time from first admission until the lower-tier
	// prefix was in GPU memory (queueing on the host link included).
	Load        time.Duration
	Queue       time.Duration
	Prefill     time.Duration // first scheduled → first token
	TTFT        time.Duration
	E2E         time.Duration
	Preemptions int
	Pinned      *PinnedSet // non-nil only for Pin requests
	// Gaps are the inter-token gaps in simulated seconds, kept only by a
	// core made with NewCore(cfg, true).
	Gaps []float32
}

// PinnedSet is a finished prefill's blocks, kept referenced until Release.
type PinnedSet struct {
	Parent uint64   // chain parent of Hashes[0]: kvindex.Root(salt)
	Hashes []uint64 // in chain order
	c      *Core
	blocks []int32
	once   sync.Once
}

// Release drops the pins. Safe to call more than once; on a live Engine,
// safe for concurrent use.
func (p *PinnedSet) Release() {
	p.once.Do(func() {
		if l := p.c.pinLock; l != nil {
			l.Lock()
			defer l.Unlock()
		}
		for _, b := range p.blocks {
			p.c.bm.release(b)
		}
		if p.c.pinRelease != nil {
			p.c.pinRelease()
		}
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
	// TierBlocks and TierCapacity are the blocks held and the capacity of
	// each tier (GPU: cached blocks of TotalBlocks); Offloaded counts the
	// blocks ever written to each lower tier.
	TierBlocks   [kvevents.NumTiers]int
	TierCapacity [kvevents.NumTiers]int
	Offloaded    [kvevents.NumTiers]int64
}

type seqState uint8

const (
	stateWaiting seqState = iota
	stateRunning
	stateDone
)

// seq is a request inside a Core; a live Engine's mutex guards it.
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
	queued      time.Duration // its place in the waiting queue (Request.QueuedAt)
	scheduled   time.Duration
	firstToken  time.Duration
	lastToken   time.Duration
	finishedAt  time.Duration
	pinned      *PinnedSet
	gaps        []float32 // inter-token gaps, seconds, when the core records them

	// A prefix found in lower tiers is loaded before the sequence computes:
	// it waits in running until loadUntil, holding refs on the lower-tier
	// copies it reads (loading, released by loadDone).
	loadUntil  time.Duration
	loading    []tierRef
	loadTime   time.Duration          // first admission's load, for Result
	tierTokens [kvevents.NumTiers]int // first admission's cached tokens by tier

	// Delivery: the reader sees outputs up to visible, after the step's
	// simulated duration has passed on the wall clock.
	visible     int
	visibleDone bool
	err         error
	notify      chan struct{}
}

func (s *seq) outputs() int { return len(s.tokens) - s.promptLen }

// Engine is one simulated worker in wall time: a Core driven by Run,
// which paces the core's simulated clock to the wall clock (scaled by
// Speedup), behind a mutex so HTTP handlers can submit and stream
// concurrently.
type Engine struct {
	Core      // guarded by mu
	wake      chan struct{}
	startWall time.Time

	mu         sync.Mutex // guards Core, every seq, and everything below
	busy       bool
	wallAnchor time.Time
	simAnchor  time.Duration
	stopped    bool
}

func newEngine(cfg Config, words []uint32) (*Engine, error) {
	c, err := newCore(cfg, words)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	e := &Engine{
		Core:       *c,
		wake:       make(chan struct{}, 1),
		startWall:  now,
		wallAnchor: now,
	}
	e.pinLock, e.pinRelease = &e.mu, e.signal
	return e, nil
}

// Load returns a snapshot of the queues and cache.
func (e *Engine) Load() Load {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.Core.Load()
}

// CachedPrefix returns how many leading blocks of the chain hashes are in
// the cache now.
func (e *Engine) CachedPrefix(hashes []uint64) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.Core.CachedPrefix(hashes)
}

// InsertBlocks is Core.InsertBlocks under the engine's lock.
func (e *Engine) InsertBlocks(parent uint64, hashes []uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.Core.InsertBlocks(parent, hashes)
}

// SnapshotTiers calls fn with the block hashes of each tier, GPU first,
// under the lock as SnapshotBlocks does.
func (e *Engine) SnapshotTiers(fn func(t kvevents.Tier, hashes []uint64)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.bm.tierHashes(fn)
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

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Now is the engine's simulated time: its clock while it runs, and the
// wall clock's simulated equivalent while it idles. A decode leg reads it on
// arrival, before pulling its KV, for Request.QueuedAt.
func (e *Engine) Now() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.busy {
		return e.clock
	}
	return max(e.clock, e.simAnchor+time.Duration(float64(time.Since(e.wallAnchor))*e.cfg.Speedup))
}

// Submit queues a request. The returned Stream yields its tokens; the
// caller must Close it.
func (e *Engine) Submit(req Request) (*Stream, error) {
	s, err := e.newSeq(req)
	if err != nil {
		return nil, err
	}
	s.notify = make(chan struct{}, 1)
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
	e.enqueue(s, e.clock)
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
	return st.s.result()
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

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// simToWall converts a simulated duration to wall time.
func (e *Engine) simToWall(d time.Duration) time.Duration {
	return time.Duration(math.Round(float64(d) / e.cfg.Speedup))
}
