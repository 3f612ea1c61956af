package sim

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/perfmodel"
)

// Core is the synchronous heart of one simulated worker: the block manager,
// the continuous-batching scheduler and the simulated clock. It starts no
// goroutine, takes no lock and never reads the wall clock. Two drivers use
// it: the live Engine runs it under its mutex and paces its clock to the
// wall clock; `switchyard simulate` runs many of them from a discrete-event
// loop in virtual time (Add, Advance). Not safe for concurrent use.
type Core struct {
	cfg     Config
	model   perfmodel.Model
	profile bus.Profile
	bs      int
	maxLen  int
	words   []uint32
	metrics *metrics // nil: not exported (virtual-time cores)

	bm      *blockManager
	waiting []*seq
	running []*seq
	clock   time.Duration // simulated time since start
	steps   uint64
	st      stepState

	// pinLock, when set, is taken by PinnedSet.Release (the live engine's
	// mutex); pinRelease runs after a release (it wakes the live engine).
	pinLock    sync.Locker
	pinRelease func()
	// recordGaps keeps every inter-token gap of every sequence (Result.Gaps).
	recordGaps bool
}

// NewCore validates cfg, sizes the KV cache and returns a core for
// virtual-time use. The Publisher in cfg receives the KV events of each
// step as it is applied; Leaser, Puller and KVXferAddr are ignored. If
// recordGaps is set, every sequence keeps its inter-token gaps for
// Result.Gaps.
func NewCore(cfg Config, recordGaps bool) (*Core, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	words, err := vocabulary()
	if err != nil {
		return nil, err
	}
	c, err := newCore(cfg, words)
	if err != nil {
		return nil, err
	}
	c.recordGaps = recordGaps
	return c, nil
}

func newCore(cfg Config, words []uint32) (*Core, error) {
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
	bm := newBlockManager(blocks)
	blockBytes := float64(m.KVBytesPerToken() * cfg.BlockSize)
	perBlock := func(bw float64) time.Duration { return time.Duration(blockBytes / bw * float64(time.Second)) }
	if cfg.KVOffloadGiB > 0 {
		if p.HostLinkBandwidth <= 0 {
			return nil, fmt.Errorf("sim: gpu %s states no host-link bandwidth, so it cannot offload", g.Name)
		}
		p.CPUBlocks = int(cfg.KVOffloadGiB * (1 << 30) / blockBytes)
		if p.CPUBlocks < 1 {
			return nil, fmt.Errorf("sim: --kv-offload-gib %g holds no block of %.0f bytes", cfg.KVOffloadGiB, blockBytes)
		}
		// Device-to-host writes use every rank's link at once.
		bm.lower = append(bm.lower, newTierStore(kvevents.TierCPU, p.CPUBlocks, perBlock(perfmodel.TierBandwidth(&p, perfmodel.TierCPU))))
	}
	if cfg.KVDiskGiB > 0 {
		p.DiskBandwidth = perfmodel.DiskBandwidth
		p.DiskBlocks = int(cfg.KVDiskGiB * (1 << 30) / blockBytes)
		if p.DiskBlocks < 1 {
			return nil, fmt.Errorf("sim: --kv-disk-gib %g holds no block of %.0f bytes", cfg.KVDiskGiB, blockBytes)
		}
		bm.lower = append(bm.lower, newTierStore(kvevents.TierDisk, p.DiskBlocks, perBlock(perfmodel.DiskBandwidth)))
	}
	bm.blockSize = cfg.BlockSize
	if _, ok := cfg.Publisher.(TokenPublisher); ok {
		bm.wire = &StepTokens{}
	}
	return &Core{
		cfg:     cfg,
		model:   m,
		profile: p,
		bs:      cfg.BlockSize,
		maxLen:  min(m.MaxModelLen, blocks*cfg.BlockSize),
		words:   words,
		bm:      bm,
	}, nil
}

// Config returns the configuration with defaults filled in and the TP
// degree resolved.
func (c *Core) Config() Config { return c.cfg }

// Profile is this worker's timing profile for the registry.
func (c *Core) Profile() bus.Profile { return c.profile }

// MaxModelLen is the longest prompt plus output the worker accepts: the
// model's limit, or the KV cache's if smaller.
func (c *Core) MaxModelLen() int { return c.maxLen }

// BlockSize is the number of tokens per KV block.
func (c *Core) BlockSize() int { return c.bs }

// TotalBlocks is the KV cache size in blocks.
func (c *Core) TotalBlocks() int { return c.bm.total() }

// KVBytesPerToken is the model's KV footprint per token over all TP ranks.
func (c *Core) KVBytesPerToken() int { return c.model.KVBytesPerToken() }

// BlockBytes is the payload size of one block.
func (c *Core) BlockBytes() int { return c.bs * c.model.KVBytesPerToken() }

// PrefillTime predicts the simulated time to prefill newTokens after
// cachedTokens, alone on this worker.
func (c *Core) PrefillTime(newTokens, cachedTokens int) time.Duration {
	return perfmodel.PrefillTime(&c.profile, newTokens, cachedTokens)
}

// Clock is the core's simulated time: the end of the last step run.
func (c *Core) Clock() time.Duration { return c.clock }

// Idle reports whether nothing is queued or running.
func (c *Core) Idle() bool { return len(c.waiting) == 0 && len(c.running) == 0 }

// Load returns a snapshot of the queues and cache.
func (c *Core) Load() Load {
	l := Load{
		Running:     len(c.running),
		Waiting:     len(c.waiting),
		UsedBlocks:  c.bm.used,
		TotalBlocks: c.bm.total(),
		SimTime:     c.clock,
	}
	l.KVUsage = float64(l.UsedBlocks) / float64(l.TotalBlocks)
	l.TierBlocks[kvevents.TierGPU], l.TierCapacity[kvevents.TierGPU] = c.bm.byHash.len(), c.bm.total()
	for _, t := range c.bm.lower {
		l.TierBlocks[t.tier], l.TierCapacity[t.tier], l.Offloaded[t.tier] = len(t.entries), t.capacity, t.stored
	}
	for _, s := range c.waiting {
		l.QueuedPrefillTokens += len(s.tokens) - s.computed
	}
	for _, s := range c.running {
		if s.computed < len(s.tokens)-1 {
			l.QueuedPrefillTokens += len(s.tokens) - s.computed
		}
		l.ActiveDecodeBlocks += len(s.blocks)
	}
	return l
}

// CachedPrefix returns how many leading blocks of the chain hashes are in
// the cache now.
func (c *Core) CachedPrefix(hashes []uint64) int { return c.bm.prefixLen(hashes) }

// InsertBlocks stores blocks received from another worker as computed,
// unreferenced cache entries: hashes is a chain continuing from parent. It
// publishes their Stored events. Blocks already cached are kept. It fails
// when the cache has no block to spare; the blocks inserted before stay.
func (c *Core) InsertBlocks(parent uint64, hashes []uint64) error {
	defer c.publish()
	c.bm.now = c.clock
	for _, h := range hashes {
		if !c.bm.byHash.has(h, c.bm.blocks) {
			i, ok := c.bm.allocate()
			if !ok {
				return fmt.Errorf("sim: insert block %016x: every KV block is in use", h)
			}
			c.bm.commit(i, parent, h, nil, "")
			c.bm.release(i)
		}
		parent = h
	}
	return nil
}

// publish hands the pending events to the publisher.
func (c *Core) publish() {
	if len(c.bm.events) == 0 {
		return
	}
	ev := c.bm.takeEvents()
	if tp, ok := c.cfg.Publisher.(TokenPublisher); ok && c.bm.wire != nil {
		tp.PublishStepTokens(ev, c.bm.takeTokens())
		return
	}
	if c.cfg.Publisher != nil {
		c.cfg.Publisher.PublishStep(ev)
	}
}

// RecycleEvents hands back events this core published, once the caller has
// applied them and will not read their hash lists again: later events reuse
// the lists instead of growing new ones block by block (3.6% of a
// 1,000-worker simulation's CPU went to growing them). Events from elsewhere
// must not be passed. A live engine's publisher keeps its events and never
// calls it.
func (c *Core) RecycleEvents(events []kvevents.Event) {
	for i := range events {
		if hs := events[i].Hashes; cap(hs) > 1 && len(c.bm.spareHashes) < maxSpareHashes {
			c.bm.spareHashes = append(c.bm.spareHashes, hs[:0])
		}
	}
}

// freeBlocks releases a sequence's blocks, last first, so that the tail of
// a prefix is evicted before its head.
func (c *Core) freeBlocks(s *seq) {
	c.loadDone(s)
	for i := len(s.blocks) - 1; i >= 0; i-- {
		c.bm.release(s.blocks[i])
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
func (c *Core) checkLength(prompt, output int) error {
	total := uint64(prompt) + uint64(output)
	if need := (total - 1 + uint64(c.bs) - 1) / uint64(c.bs); need > uint64(c.bm.total()) {
		return fmt.Errorf("%w: %d prompt + %d output tokens need %d blocks of %d tokens, the cache has %d",
			ErrNeverFits, prompt, output, need, c.bs, c.bm.total())
	}
	if total > uint64(c.model.MaxModelLen) {
		return fmt.Errorf("%w: %d prompt + %d output tokens > %d", ErrContextLength, prompt, output, c.model.MaxModelLen)
	}
	return nil
}

// newSeq validates req and builds its sequence: output limit, finish
// reason and generation seed. It reads only configuration.
func (c *Core) newSeq(req Request) (*seq, error) {
	n := len(req.Tokens)
	if n == 0 {
		return nil, ErrEmptyPrompt
	}
	limit, finish := req.MaxTokens, "length"
	var genSeed uint64
	if req.Seed != nil {
		genSeed = splitmix64(uint64(*req.Seed))
	} else {
		genSeed = kvindex.HashBlock(uint64(c.cfg.Seed), req.Tokens)
	}
	if req.Choice > 0 {
		genSeed = splitmix64(genSeed ^ uint64(req.Choice))
	}
	if limit <= 0 {
		limit, finish = max(naturalLength(genSeed), req.MinTokens), "stop"
		if req.IgnoreEOS {
			limit, finish = c.maxLen-n, "length"
		}
		limit = max(1, min(limit, c.maxLen-n))
	}
	if req.Pin {
		limit, finish = 1, "length"
	}
	if err := c.checkLength(n, limit); err != nil {
		return nil, err
	}
	// Sized for the whole sequence up front: growing them block by block
	// took 10% of a 1,000-worker simulation's CPU. Recycled (recycle.go).
	nb := ceilDiv(n+limit, c.bs)
	s := &seq{
		req:       req,
		tokens:    append(tokenPool.take(n+limit), req.Tokens...),
		promptLen: n,
		limit:     limit,
		finish:    finish,
		genSeed:   genSeed,
		hashes:    hashPool.take(nb),
		blocks:    blockPool.take(nb),
	}
	if req.Hashes != nil {
		if len(req.Hashes) != n/c.bs {
			return nil, fmt.Errorf("sim: %d prompt hashes for %d full blocks of %d tokens", len(req.Hashes), n/c.bs, c.bs)
		}
		s.hashes = append(s.hashes, req.Hashes...)
		s.req.Hashes = nil // the caller's buffer
	}
	if c.recordGaps {
		s.gaps = make([]float32, 0, limit-1)
	}
	return s, nil
}

// Handle is a sequence added with Core.Add.
type Handle struct{ s *seq }

// Tag is the request's Tag.
func (h Handle) Tag() int { return h.s.req.Tag }

// Result is the sequence's result so far; complete once a Delivery said
// Done.
func (h Handle) Result() Result { return h.s.result() }

// Delivery is a first token or a finish that a step produced.
type Delivery struct {
	H     Handle
	At    time.Duration // the end of the step that produced it
	First bool          // the first output token
	Done  bool          // the sequence finished
}

// Add queues req, arrived at simulated time at. A core whose clock is
// behind at catches up first (it was idle or stalled); the caller must not
// add a request arriving before the clock of a core it is still stepping
// towards, except to queue it behind the current step, as a live engine
// would.
func (c *Core) Add(req Request, at time.Duration) (Handle, error) {
	s, err := c.newSeq(req)
	if err != nil {
		return Handle{}, err
	}
	c.clock = max(c.clock, at)
	c.enqueue(s, at)
	return Handle{s}, nil
}

// enqueue queues s, arrived at at, at the back of the waiting queue, or at
// its Request.QueuedAt place: behind every waiting sequence queued no later
// than that, ahead of those queued since, but never ahead of a preempted
// one (which holds the head, as in vLLM). The scan starts at the back, so a
// normal arrival costs nothing.
func (c *Core) enqueue(s *seq, at time.Duration) {
	s.arrival, s.queued = at, at
	if q := s.req.QueuedAt; q > 0 && q < at {
		s.queued = q
	}
	i := len(c.waiting)
	for i > 0 && c.waiting[i-1].queued > s.queued && c.waiting[i-1].preemptions == 0 {
		i--
	}
	c.waiting = slices.Insert(c.waiting, i, s)
}

// Advance runs scheduler steps back to back, applying each at once, and
// returns the simulated time it advanced (0 when there was nothing to run)
// and the first tokens and finishes produced. It stops after the first step
// that produced any, or that ended at or after horizon: a decode phase that
// nothing interrupts is one call, not one call per step. The returned
// slice is reused by the next call.
func (c *Core) Advance(horizon time.Duration) (time.Duration, []Delivery) {
	start := c.clock
	var out []Delivery
	st := &c.st
	out = st.out[:0]
	for {
		dt := c.step(st)
		if dt == 0 {
			break
		}
		for _, d := range st.dels {
			first := d.visible == 1
			if first || d.done {
				out = append(out, Delivery{H: Handle{d.s}, At: c.clock, First: first, Done: d.done})
			}
		}
		if len(out) > 0 || c.clock >= horizon {
			break
		}
	}
	st.out = out
	return c.clock - start, out
}

// result builds the sequence's Result.
func (s *seq) result() Result {
	return Result{
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
		Gaps:         s.gaps,
		TierTokens:   s.tierTokens,
		Load:         s.loadTime,
	}
}

// Steps is how many scheduler steps the core has run.
func (c *Core) Steps() uint64 { return c.steps }

// CatchUp moves an idle or stalled core's clock forward to t (never back):
// call it before Advance when the core has been waiting on something other
// than its own steps (a released pin, an inserted block).
func (c *Core) CatchUp(t time.Duration) { c.clock = max(c.clock, t) }
