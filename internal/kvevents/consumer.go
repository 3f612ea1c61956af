package kvevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-llm/switchyard/internal/bus"
)

// IndexWriter is the part of the prefix index the consumer writes to.
// kvindex.Index implements it. Calls for one worker never overlap; calls
// for different workers may. Implementations must not retain hashes.
type IndexWriter interface {
	// StoreTier records blocks held by worker in tier t; false means the
	// index refused the worker (it is full of workers).
	StoreTier(worker string, t Tier, hashes []uint64) bool
	// RemoveTier records that worker no longer holds the blocks in tier t;
	// a block it holds in another tier stays there.
	RemoveTier(worker string, t Tier, hashes []uint64)
	Clear(worker string)
	DropWorker(worker string)
}

// Defaults for ConsumerConfig.
const (
	// DefaultSilenceAfter: 2.5 missed 1 s heartbeats, so a stalled stream
	// is flagged within 3 s of its last batch (plus one check tick, ≤ 100 ms).
	DefaultSilenceAfter    = 2500 * time.Millisecond
	DefaultSnapshotTimeout = 2 * time.Second
	DefaultLogEvery        = 5 * time.Second
	// DefaultMaxPending bounds the batches buffered per worker during a
	// resync; past it, another resync follows.
	DefaultMaxPending = 4096
)

// Resync pacing: a snapshot that does not bring the worker in sync (the
// buffered batches do not follow it) is followed by another after
// resyncBackoffMin, doubling per failure in a row up to
// resyncBackoffMax. One batch with a forged epoch once made a consumer
// fetch 17,609 snapshots in 20 s at 64% of a core; with the backoff, a
// worker that keeps failing costs a handful of requests a minute.
const (
	resyncBackoffMin = 50 * time.Millisecond
	resyncBackoffMax = 30 * time.Second
)

// resyncBackoff is the wait after fails resync attempts in a row.
func resyncBackoff(fails int) time.Duration {
	if fails <= 0 {
		return 0
	}
	d := resyncBackoffMin << min(fails-1, 20)
	return min(d, resyncBackoffMax)
}

// maxEpochSkew bounds how far in the future (by this host's clock) an
// epoch may lie: epochs are the worker's start time in nanoseconds, so one
// beyond now plus any sane clock skew was not made by a worker starting.
const maxEpochSkew = 10 * time.Minute

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	NC       *nats.Conn
	Subjects bus.Subjects
	Index    IndexWriter
	// SilenceAfter marks a worker silent; 0 means DefaultSilenceAfter.
	SilenceAfter time.Duration
	// SnapshotTimeout bounds one snapshot request; 0 means
	// DefaultSnapshotTimeout.
	SnapshotTimeout time.Duration
	// LogEvery rate-limits log lines per worker (and for malformed
	// messages overall); 0 means DefaultLogEvery.
	LogEvery time.Duration
	// MaxPending: see DefaultMaxPending.
	MaxPending int
	// ExpectWithin and ExpectGrace: see ExpectEvents; 0 means
	// DefaultExpectWithin and DefaultExpectGrace.
	ExpectWithin time.Duration
	ExpectGrace  time.Duration
	// PendingMsgs and PendingBytes are the NATS subscription's buffer;
	// beyond it NATS drops (seen as gaps). 0 means 1M messages / 256 MiB.
	PendingMsgs  int
	PendingBytes int
	// RegisteredOnly applies events only from workers announced with
	// SetExpected. A frontend sets it so that a worker the registry refused
	// (another model or block size) never reaches the index; such events
	// are counted as stale. Its first snapshot is fetched on SetExpected.
	RegisteredOnly bool
	Logger         *slog.Logger
}

// Consumer subscribes to every worker's KV events in a namespace, applies
// them to an index and tracks each worker's event health. Methods are safe
// for concurrent use; Run does the work.
type Consumer struct {
	cfg    ConsumerConfig
	log    *slog.Logger
	prefix string
	kick   chan struct{}

	mu      sync.RWMutex // guards workers
	workers map[string]*worker

	// runMu makes sure no message handler runs after Run returns.
	runMu   sync.RWMutex
	stopped bool

	malformed atomic.Uint64 // all undecodable messages, known worker or not

	unregistered atomic.Uint64 // batches of workers the registry does not list (RegisteredOnly)
	malLogMu     sync.Mutex
	malLogLast   time.Time
	malLogSupp   int

	// unknownScratch decodes messages from workers not seen before; only
	// the NATS delivery goroutine uses it.
	unknownScratch Batch
}

// worker is one worker's sync state.
type worker struct {
	id string

	mu         sync.Mutex // guards everything below
	forgotten  bool
	expected   bool // SetExpected was called
	enabled    bool // registry says events are on
	state      State
	cause      string
	synced     bool // epoch/lastSeq are a valid baseline
	epoch      uint64
	lastSeq    uint64
	lastSeen   time.Time
	needResync bool
	resyncing  bool // a resync goroutine is running
	retryAt    time.Time
	// regEpoch is the epoch the registry entry shows (ExpectEpoch); 0
	// until known. Only it can make a newer epoch credible.
	regEpoch uint64
	// resyncFails counts resync attempts in a row that did not end in
	// sync; it sets the backoff before the next (resyncBackoff).
	resyncFails int
	pending     []Batch
	overflow    bool
	scratch     Batch
	h           WorkerHealth // counters
	logLast     time.Time
	logSupp     int
	logState    State // the state the last log line reported
	// Expectations (see ExpectEvents): when the last batch with events
	// arrived; the routing time of the oldest request still owed events,
	// and by when; and whether the worker is silent for owing them.
	lastEventsAt time.Time
	expectSince  time.Time
	expectBy     time.Time
	expectSilent bool
	expectSet    time.Time // when ExpectEvents last armed (or tightened) the expectation
}

// NewConsumer validates cfg and returns a Consumer; call Run.
func NewConsumer(cfg ConsumerConfig) (*Consumer, error) {
	if cfg.NC == nil {
		return nil, errors.New("kvevents: consumer: no NATS connection")
	}
	if cfg.Index == nil {
		return nil, errors.New("kvevents: consumer: no index")
	}
	if cfg.SilenceAfter <= 0 {
		cfg.SilenceAfter = DefaultSilenceAfter
	}
	if cfg.SnapshotTimeout <= 0 {
		cfg.SnapshotTimeout = DefaultSnapshotTimeout
	}
	if cfg.LogEvery <= 0 {
		cfg.LogEvery = DefaultLogEvery
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	if cfg.ExpectWithin <= 0 {
		cfg.ExpectWithin = DefaultExpectWithin
	}
	if cfg.ExpectGrace <= 0 {
		cfg.ExpectGrace = DefaultExpectGrace
	}
	if cfg.PendingMsgs <= 0 {
		cfg.PendingMsgs = 1 << 20
	}
	if cfg.PendingBytes <= 0 {
		cfg.PendingBytes = 256 << 20
	}
	c := &Consumer{
		cfg:     cfg,
		log:     cfg.Logger,
		prefix:  cfg.Subjects.KVEventsPrefix(),
		kick:    make(chan struct{}, 1),
		workers: make(map[string]*worker),
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Run subscribes and works until ctx ends: it applies batches as they
// arrive (on the NATS delivery goroutine), flags silent workers and runs
// resyncs. It returns nil when ctx ends, after every goroutine it started
// has returned and no message handler is running.
func (c *Consumer) Run(ctx context.Context) error {
	sub, err := c.cfg.NC.Subscribe(c.cfg.Subjects.KVEventsAll(), func(m *nats.Msg) {
		c.runMu.RLock()
		if !c.stopped {
			c.handle(m.Subject, m.Data, time.Now())
		}
		c.runMu.RUnlock()
	})
	if err != nil {
		return fmt.Errorf("kvevents: subscribe %s: %w", c.cfg.Subjects.KVEventsAll(), err)
	}
	if err := sub.SetPendingLimits(c.cfg.PendingMsgs, c.cfg.PendingBytes); err != nil {
		sub.Unsubscribe()
		return fmt.Errorf("kvevents: pending limits: %w", err)
	}
	var wg sync.WaitGroup
	defer func() {
		sub.Unsubscribe()
		c.runMu.Lock()
		c.stopped = true
		c.runMu.Unlock()
		wg.Wait()
	}()
	// A tenth of the silence threshold keeps detection close to it.
	tick := time.NewTicker(min(max(c.cfg.SilenceAfter/10, 10*time.Millisecond), 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			c.checkSilence(now)
			c.startResyncs(ctx, &wg, now)
		case <-c.kick:
			c.startResyncs(ctx, &wg, time.Now())
		}
	}
}

// handle decodes and applies one message. It runs on the NATS delivery
// goroutine, one message at a time.
func (c *Consumer) handle(subject string, data []byte, now time.Time) {
	id, ok := strings.CutPrefix(subject, c.prefix)
	if !ok || bus.ValidateName("worker id", id) != nil {
		c.reject(subject, errors.New("kvevents: subject does not name a worker"))
		return
	}
	c.mu.RLock()
	w := c.workers[id]
	c.mu.RUnlock()
	if w == nil && c.cfg.RegisteredOnly {
		// No state for workers the registry does not list: a refused or
		// departed worker must not reappear (in health, metrics or index).
		c.unregistered.Add(1)
		return
	}
	if w == nil {
		// Decode before creating state, so garbage cannot create workers.
		if err := DecodeBatch(data, &c.unknownScratch); err != nil {
			c.reject(subject, err)
			return
		}
		if c.unknownScratch.WorkerID != id {
			c.reject(subject, fmt.Errorf("kvevents: batch of worker %q on subject %s", c.unknownScratch.WorkerID, subject))
			return
		}
		w = c.getOrCreate(id, now)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.forgotten {
		return
	}
	err := DecodeBatch(data, &w.scratch)
	if err == nil && w.scratch.WorkerID != id {
		err = fmt.Errorf("kvevents: batch of worker %q on subject %s", w.scratch.WorkerID, subject)
	}
	if err != nil {
		w.h.Malformed++
		c.reject(subject, err)
		return
	}
	c.applyLocked(w, &w.scratch, now)
}

func (c *Consumer) getOrCreate(id string, now time.Time) *worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.workers[id]
	if w == nil {
		w = &worker{id: id, state: StateResyncing, cause: "waiting for first events", lastSeen: now}
		c.workers[id] = w
	}
	return w
}

// reject counts and (rate-limited) logs a malformed message.
func (c *Consumer) reject(subject string, err error) {
	c.malformed.Add(1)
	now := time.Now()
	c.malLogMu.Lock()
	defer c.malLogMu.Unlock()
	if now.Sub(c.malLogLast) < c.cfg.LogEvery {
		c.malLogSupp++
		return
	}
	c.log.Warn("malformed kv event message rejected", "subject", subject, "err", err, "suppressed", c.malLogSupp)
	c.malLogLast, c.malLogSupp = now, 0
}

// applyLocked applies or buffers one decoded batch. w.mu is held.
func (c *Consumer) applyLocked(w *worker, b *Batch, now time.Time) {
	prevSeen := w.lastSeen
	w.lastSeen = now
	if w.expected && !w.enabled {
		w.h.Stale++
		return
	}
	if w.needResync {
		c.bufferLocked(w, b)
		if w.state != StateResyncing {
			c.setStateLocked(w, StateResyncing, "events resumed; resyncing", now)
			c.kickResync()
		}
		return
	}
	if b.Epoch > w.epoch && !c.plausibleLocked(w, b.Epoch, now) {
		// A newer epoch the registry does not vouch for (or, without one,
		// from the future) is not a restart: it would make every later
		// batch look old, and every snapshot look stale.
		w.lastSeen = prevSeen
		w.h.Implausible++
		return
	}
	switch {
	case !w.synced && b.Seq == 1:
		// First contact at the start of an epoch: the batches are the
		// worker's whole history, no snapshot needed.
		w.synced, w.epoch, w.lastSeq = true, b.Epoch, 0
	case !w.synced:
		c.startResyncLocked(w, b, fmt.Sprintf("first batch seen mid-stream (seq %d)", b.Seq), now)
		return
	case b.Epoch < w.epoch:
		// A dead run's late batch: it says nothing about the live one, so
		// it must not keep the worker looking alive either.
		w.lastSeen = prevSeen
		w.h.Stale++
		return
	case b.Epoch > w.epoch:
		c.startResyncLocked(w, b, fmt.Sprintf("epoch changed from %d to %d (worker restarted)", w.epoch, b.Epoch), now)
		return
	case b.Seq <= w.lastSeq:
		w.h.Stale++
		return
	case b.Seq != w.lastSeq+1:
		w.h.Gaps++
		c.startResyncLocked(w, b, fmt.Sprintf("sequence gap: expected %d, got %d", w.lastSeq+1, b.Seq), now)
		return
	}
	if !c.applyEventsLocked(w, b) {
		c.startResyncLocked(w, nil, "kv index refused the worker (worker limit reached)", now)
		return
	}
	w.lastSeq = b.Seq
	if len(b.Events) > 0 {
		w.lastEventsAt = now
		w.expectSince, w.expectBy, w.expectSilent = time.Time{}, time.Time{}, false
	}
	if w.state != StateHealthy && !w.expectSilent {
		c.setStateLocked(w, StateHealthy, "in sync at seq "+fmt.Sprint(b.Seq), now)
	}
}

// plausibleLocked reports whether epoch may be the worker's current run:
// the registry's epoch when it is known (a restarted worker re-registers
// before it publishes, and ExpectEpoch resyncs when the entry arrives),
// else any epoch not beyond now plus maxEpochSkew.
func (c *Consumer) plausibleLocked(w *worker, epoch uint64, now time.Time) bool {
	if w.regEpoch != 0 {
		return epoch == w.regEpoch
	}
	return epoch <= uint64(now.Add(maxEpochSkew).UnixNano())
}

// applyEventsLocked writes b's events to the index; false if it refused.
func (c *Consumer) applyEventsLocked(w *worker, b *Batch) bool {
	ok, blocks := Apply(c.cfg.Index, w.id, b.Events)
	w.h.Blocks += uint64(blocks)
	for i := range b.Events {
		if e := &b.Events[i]; e.Kind != Cleared {
			w.h.TierBlocks[min(e.Medium, TierDisk)] += uint64(len(e.Hashes))
		}
	}
	w.h.UnknownMedia += uint64(b.UnknownMedia)
	w.h.Batches++
	return ok
}

// Apply writes one worker's events to the index in order, exactly as the
// consumer does for an in-sequence batch: it is the event path's semantics
// for callers that hold the events in process (switchyard simulate). It
// returns false if the index refused the worker, and the number of block
// hashes the events named.
func Apply(idx IndexWriter, worker string, events []Event) (ok bool, blocks int) {
	ok = true
	for i := range events {
		e := &events[i]
		switch e.Kind {
		case Stored:
			ok = idx.StoreTier(worker, e.Medium, e.Hashes) && ok
		case Removed:
			idx.RemoveTier(worker, e.Medium, e.Hashes)
		case Cleared:
			idx.Clear(worker)
		}
		blocks += len(e.Hashes)
	}
	return ok, blocks
}

func (c *Consumer) startResyncLocked(w *worker, b *Batch, cause string, now time.Time) {
	w.needResync = true
	if b != nil {
		c.bufferLocked(w, b)
	}
	c.setStateLocked(w, StateResyncing, cause, now)
	c.kickResync()
}

// bufferLocked keeps a deep copy of b for replay after the snapshot.
func (c *Consumer) bufferLocked(w *worker, b *Batch) {
	if len(w.pending) >= c.cfg.MaxPending {
		w.overflow = true
		return
	}
	cp := *b
	cp.Events = make([]Event, len(b.Events))
	for i, e := range b.Events {
		cp.Events[i] = Event{Kind: e.Kind, Parent: e.Parent, Hashes: slices.Clone(e.Hashes)}
	}
	w.pending = append(w.pending, cp)
}

func (c *Consumer) kickResync() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// causeRegistered is the resync every worker starts with when it registers.
const causeRegistered = "registered; fetching a snapshot"

// setStateLocked changes state and logs the transition, at most once per
// LogEvery per worker (suppressed transitions are counted in the next line).
func (c *Consumer) setStateLocked(w *worker, s State, cause string, now time.Time) {
	if w.state == s && w.cause == cause {
		return
	}
	w.state, w.cause = s, cause
	// The rate limit never hides a worker getting worse: a change to a
	// non-healthy state other than the one last logged is always logged.
	worse := s != StateHealthy && s != w.logState
	if now.Sub(w.logLast) < c.cfg.LogEvery && !worse {
		w.logSupp++
		return
	}
	level := slog.LevelWarn
	if s == StateHealthy || cause == causeRegistered {
		level = slog.LevelInfo // a new worker's first snapshot is routine
	}
	c.log.Log(context.Background(), level, "kv event health changed", "worker", w.id, "state", s.String(), "cause", cause, "suppressed", w.logSupp)
	w.logLast, w.logSupp, w.logState = now, 0, s
}

func (c *Consumer) snapshotWorkers() []*worker {
	c.mu.RLock()
	defer c.mu.RUnlock()
	ws := make([]*worker, 0, len(c.workers))
	for _, w := range c.workers {
		ws = append(ws, w)
	}
	return ws
}

func (c *Consumer) checkSilence(now time.Time) {
	for _, w := range c.snapshotWorkers() {
		w.mu.Lock()
		if !w.expectSince.IsZero() && now.After(w.expectBy) && w.state == StateHealthy {
			w.expectSilent = true
			c.setStateLocked(w, StateSilent, fmt.Sprintf("no KV events since a request routed %v ago that should have stored blocks (heartbeats alone do not count: the engine's event stream may have stopped)",
				now.Sub(w.expectSince).Round(time.Millisecond)), now)
			w.expectSince, w.expectBy = time.Time{}, time.Time{}
		}
		if !(w.expected && !w.enabled) && w.state != StateSilent {
			if age := now.Sub(w.lastSeen); age > c.cfg.SilenceAfter {
				c.setStateLocked(w, StateSilent, fmt.Sprintf("no events or heartbeats for %v", age.Round(time.Millisecond)), now)
			}
		}
		w.mu.Unlock()
	}
}

// startResyncs launches a resync for each worker that needs one and is not
// silent (a silent worker is retried when it speaks again).
func (c *Consumer) startResyncs(ctx context.Context, wg *sync.WaitGroup, now time.Time) {
	for _, w := range c.snapshotWorkers() {
		w.mu.Lock()
		if w.needResync && !w.resyncing && !w.forgotten && w.state != StateSilent && !now.Before(w.retryAt) {
			w.resyncing = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.resync(ctx, w)
			}()
		}
		w.mu.Unlock()
	}
}

// resync fetches one snapshot and installs it. When that does not end in
// sync, the next attempt waits resyncBackoff (startResyncs honours
// retryAt), so a worker whose snapshots never reconcile costs a few
// requests a minute, not a core.
func (c *Consumer) resync(ctx context.Context, w *worker) {
	subject := c.cfg.Subjects.Snapshot(w.id)
	var snap Snapshot
	asked := time.Now()
	rctx, cancel := context.WithTimeout(ctx, c.cfg.SnapshotTimeout)
	msg, err := c.cfg.NC.RequestWithContext(rctx, subject, nil)
	cancel()
	if err == nil {
		err = DecodeSnapshot(msg.Data, &snap)
	}
	if err == nil && snap.Err != "" {
		err = fmt.Errorf("kvevents: worker refused snapshot: %s", snap.Err)
	}
	if err == nil && snap.WorkerID != w.id {
		err = fmt.Errorf("kvevents: snapshot of worker %q", snap.WorkerID)
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.resyncing = false
	switch {
	case w.forgotten || ctx.Err() != nil || !w.needResync:
		return
	case err != nil:
		// A failed request is cheap (no responders fails at once, a
		// timeout took SnapshotTimeout), so retry at a steady modest
		// pace: a worker back from a bus outage must resync at once.
		w.h.ResyncFailures++
		w.retryAt = now.Add(min(c.cfg.SnapshotTimeout, 500*time.Millisecond))
		c.setStateLocked(w, StateResyncing, "snapshot request failed: "+err.Error(), now)
		return
	}
	w.lastSeen = now
	if !c.installLocked(w, &snap, asked, now) {
		c.failResyncLocked(w, w.cause, now)
		return
	}
	if !w.needResync {
		w.resyncFails = 0
	}
}

// failResyncLocked schedules the next attempt after a snapshot that did
// not bring the worker in sync, backing off, and says in the worker's
// cause (as /health shows it) that it keeps failing.
func (c *Consumer) failResyncLocked(w *worker, cause string, now time.Time) {
	w.resyncFails++
	wait := resyncBackoff(w.resyncFails)
	w.retryAt = now.Add(wait)
	w.h.ResyncFailures++
	if w.resyncFails > 1 {
		cause = fmt.Sprintf("resync failing (%d attempts in a row; next in %v): %s", w.resyncFails, wait.Round(time.Millisecond), cause)
	}
	c.setStateLocked(w, StateResyncing, cause, now)
}

// installLocked replaces the worker's index entries with the snapshot and
// replays buffered batches after it. It reports whether the worker is now in
// sync; if not, the caller fetches another snapshot.
func (c *Consumer) installLocked(w *worker, s *Snapshot, asked, now time.Time) bool {
	c.cfg.Index.Clear(w.id)
	ok := c.cfg.Index.StoreTier(w.id, TierGPU, s.Hashes)
	for _, l := range s.Lower {
		ok = ok && c.cfg.Index.StoreTier(w.id, l.Medium, l.Hashes)
	}
	w.h.UnknownMedia += uint64(s.UnknownMedia)
	if !ok {
		w.pending = w.pending[:0]
		w.retryAt = now.Add(time.Second)
		c.setStateLocked(w, StateResyncing, "kv index refused the worker (worker limit reached)", now)
		return true // stop this round; startResyncs retries after retryAt
	}
	w.h.Resyncs++
	w.synced, w.epoch, w.lastSeq = true, s.Epoch, s.Seq
	pending := w.pending
	w.pending = nil
	again := w.overflow
	w.overflow = false
	for i := range pending {
		b := &pending[i]
		if b.Epoch < w.epoch || b.Epoch == w.epoch && b.Seq <= w.lastSeq {
			continue // already in the snapshot
		}
		if b.Epoch > w.epoch && !c.plausibleLocked(w, b.Epoch, now) {
			w.h.Implausible++
			continue // buffered before the registry said otherwise
		}
		if b.Epoch > w.epoch || b.Seq != w.lastSeq+1 {
			if b.Epoch == w.epoch {
				w.h.Gaps++
			}
			w.pending = pending[i:]
			again = true
			break
		}
		if !c.applyEventsLocked(w, b) {
			// The index refused the worker mid-replay: not in sync.
			w.pending = w.pending[:0]
			w.retryAt = now.Add(time.Second)
			c.setStateLocked(w, StateResyncing, "kv index refused the worker (worker limit reached)", now)
			return true // stop this round; startResyncs retries after retryAt
		}
		w.lastSeq = b.Seq
	}
	if again {
		w.pending = slices.Clone(w.pending)
		w.cause = fmt.Sprintf("snapshot at epoch %d seq %d does not reach the buffered events; fetching another", s.Epoch, s.Seq)
		return false
	}
	w.needResync = false
	// An expectation armed before the snapshot was asked for is met by it:
	// the request had its first token by then, so the blocks it stored are
	// in the worker's own account of what it holds, while the events that
	// reported them are what the resync replaced (lost in a NATS outage,
	// say). Judged later, it would flag a worker whose index is now exact,
	// and one that stores nothing new (all its prompts cached) would stay
	// silent for good. One armed since then still stands.
	if w.expectSet.Before(asked) {
		w.expectSince, w.expectBy, w.expectSilent = time.Time{}, time.Time{}, false
	}
	c.setStateLocked(w, StateHealthy, fmt.Sprintf("resynced from snapshot at seq %d (%d blocks)", s.Seq, len(s.Hashes)), now)
	return true
}

// Defaults for the expectation of events (see ExpectEvents).
const (
	// DefaultExpectWithin bounds, from routing, how long a request that
	// should store blocks may go without any KV event from its worker.
	DefaultExpectWithin = 2500 * time.Millisecond
	// DefaultExpectGrace is the least time allowed after the request's
	// first token, when that came later: an engine publishes a step's
	// events when the step ends, so they are on the wire by then.
	DefaultExpectGrace = 500 * time.Millisecond
)

// ExpectEvents tells the consumer that a request routed to worker at
// routed has produced its first token and should have made the worker
// store blocks: its prompt had full blocks the index did not show on that
// worker. If no batch with events arrives from the worker by
// routed+ExpectWithin, or ExpectGrace after now if that is later, the
// worker is flagged silent, heartbeats notwithstanding, until a batch with
// events arrives. Real engines send no heartbeats and a bridge's heartbeats
// only prove the bridge alive, so this is what catches an engine whose
// event stream stopped while it serves. A batch with events that arrived
// after routed already satisfies it, and a snapshot asked for after this
// call meets it. Only a healthy worker is judged.
func (c *Consumer) ExpectEvents(workerID string, routed time.Time) {
	c.mu.RLock()
	w := c.workers[workerID]
	c.mu.RUnlock()
	if w == nil {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.lastEventsAt.Before(routed) || w.state != StateHealthy {
		return
	}
	by := routed.Add(c.cfg.ExpectWithin)
	if g := now.Add(c.cfg.ExpectGrace); g.After(by) {
		by = g
	}
	if w.expectSince.IsZero() || routed.Before(w.expectSince) {
		w.expectSince = routed
	}
	if w.expectBy.IsZero() || by.Before(w.expectBy) {
		w.expectBy = by
	}
	w.expectSet = now
}

// SetExpected tells the consumer the registry lists worker, with KV events
// on or off. A worker with events off is disabled: its index entries are
// cleared and its events ignored. A worker with events on that sends nothing
// becomes silent after SilenceAfter.
func (c *Consumer) SetExpected(workerID string, eventsEnabled bool) {
	now := time.Now()
	w := c.getOrCreate(workerID, now)
	w.mu.Lock()
	defer w.mu.Unlock()
	wasDisabled := w.expected && !w.enabled
	w.expected, w.enabled = true, eventsEnabled
	switch {
	case !eventsEnabled && !wasDisabled:
		c.cfg.Index.Clear(workerID)
		w.synced, w.needResync, w.pending = false, false, nil
		c.setStateLocked(w, StateDisabled, "registry entry says KV events are disabled", now)
	case eventsEnabled && wasDisabled:
		w.lastSeen = now
		c.setStateLocked(w, StateResyncing, "waiting for first events", now)
	}
	if eventsEnabled && c.cfg.RegisteredOnly && !w.synced && !w.needResync {
		// Its earlier events were ignored: start from a snapshot.
		w.lastSeen = now
		c.startResyncLocked(w, nil, causeRegistered, now)
	}
}

// ExpectEpoch tells the consumer the registry's epoch for worker. A newer
// epoch than the one in sync means the worker restarted: resynchronise
// rather than trust an index built from the dead run.
func (c *Consumer) ExpectEpoch(workerID string, epoch uint64) {
	c.mu.RLock()
	w := c.workers[workerID]
	c.mu.RUnlock()
	if w == nil || epoch == 0 {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.regEpoch = epoch
	if w.synced && epoch > w.epoch && !w.needResync {
		c.startResyncLocked(w, nil, fmt.Sprintf("registry shows epoch %d, events in sync at epoch %d (worker restarted)", epoch, w.epoch), now)
	}
}

// Forget drops all state for worker and its index entries (it left the
// registry). Events it still sends make it known again.
func (c *Consumer) Forget(workerID string) {
	c.mu.Lock()
	w := c.workers[workerID]
	delete(c.workers, workerID)
	c.mu.Unlock()
	if w == nil {
		return
	}
	w.mu.Lock()
	w.forgotten = true
	c.cfg.Index.DropWorker(workerID)
	w.mu.Unlock()
}

// HealthOf returns one worker's health, or false if it is not known. It
// locks only that worker, unlike HealthAll.
func (c *Consumer) HealthOf(workerID string) (WorkerHealth, bool) {
	c.mu.RLock()
	w := c.workers[workerID]
	c.mu.RUnlock()
	if w == nil {
		return WorkerHealth{}, false
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.healthLocked(now), true
}

// Health returns worker's state; StateUnknown if never heard of.
func (c *Consumer) Health(workerID string) State {
	c.mu.RLock()
	w := c.workers[workerID]
	c.mu.RUnlock()
	if w == nil {
		return StateUnknown
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// HealthAll returns every known worker's health.
func (c *Consumer) HealthAll() map[string]WorkerHealth {
	now := time.Now()
	out := make(map[string]WorkerHealth)
	for _, w := range c.snapshotWorkers() {
		w.mu.Lock()
		out[w.id] = w.healthLocked(now)
		w.mu.Unlock()
	}
	return out
}

func (w *worker) healthLocked(now time.Time) WorkerHealth {
	h := w.h
	h.State, h.Cause, h.Epoch, h.LastSeq = w.state, w.cause, w.epoch, w.lastSeq
	h.LastEventAge = now.Sub(w.lastSeen)
	return h
}

// Malformed counts every rejected message, whether or not its worker is known.
// Unregistered counts batches ignored under RegisteredOnly because the
// registry did not list their worker.
func (c *Consumer) Unregistered() uint64 { return c.unregistered.Load() }

func (c *Consumer) Malformed() uint64 { return c.malformed.Load() }

// Register adds the consumer's metrics to reg:
//
//	switchyard_kv_event_health{worker,state}  1 for the worker's current state, 0 for the other three
//	switchyard_kv_event_age_seconds{worker}   time since the worker's last batch or heartbeat
//	switchyard_kv_event_batches_total{worker}, _blocks_total, _gaps_total, _resyncs_total
//	switchyard_kv_event_malformed_total       rejected messages (no worker label: the subject may be garbage)
func (c *Consumer) Register(reg prometheus.Registerer) error {
	if err := reg.Register(metrics{c}); err != nil {
		return fmt.Errorf("kvevents: register metrics: %w", err)
	}
	return nil
}
