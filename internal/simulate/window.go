package simulate

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/router"
)

// A windowed run steps an aggregated cluster's workers on several
// goroutines and keeps the serial run's report, byte for byte.
//
// Why it can: between two arrivals an aggregated worker's events (step ends
// and report ticks) touch nothing of another worker. They read only the
// worker, its core and its requests, and the run's fixed inputs; what they
// change outside the worker (index, router load tracking, the run's counters,
// the event queue) is an effect, and nothing reads those between arrivals:
// the router and the index are read only by the arrival's Pick.
//
// So a window, up to and including the next arrival's time (events at that
// time come first in the serial loop too), runs in three steps:
//
//  1. ahead: every worker with an event due in the window runs its own
//     events in its own order, logging their effects, on one of the
//     goroutines (workers taken one at a time from a shared counter).
//     Meanwhile the driver materialises the arrival's prompt and hashes.
//  2. replay: the driver pops the window's events from the queue in the
//     serial order, (time, seq), and applies each one's logged effects,
//     queueing the events they queue with fresh seqs, exactly as the serial
//     loop would have made them. Whatever the router's insides, it sees the
//     serial run's calls in the serial order. The index writes are applied
//     last (nothing reads the index before the arrival's Pick), split by
//     the index's lock stripes across the goroutines, each stripe's in the
//     serial order (writeIndex; kvindex.Index.Stripe says why that is
//     exact).
//  3. the arrival, serially, up to the router's Started: queueing the
//     request on its worker's core and starting the worker's step are the
//     worker's own business, so the next window runs them ahead first and
//     replays their effects first, where the serial run makes them (in the
//     arrival, before anything later).
//
// A worker's own events pop in the order it ran them: two of its events due
// at the same time pop by seq, which follows the order they were queued in,
// and the worker counts its queueings (pushes) to run them in that order.
//
// Disaggregated clusters run serially: a prefill worker's step end starts a
// transfer and a link's completion adds a request to a decode worker, so
// their workers touch each other between arrivals.

// Effect kinds.
const (
	fxApply      uint8 = iota // apply worker events [lo, hi) to the index
	fxPush                    // queue the worker's event ev at at
	fxLoad                    // router.ObserveLoad(load)
	fxFirstToken              // router.FirstToken(req)
	fxFinished                // router.Finished(req)
	fxDone                    // a request finished: the run's counters
	fxEnd                     // the end of one event's effects
)

// An effect is one change a worker's event handler makes outside the
// worker.
type effect struct {
	kind   uint8
	ev     uint8 // fxPush: evStep or evReport
	at     time.Duration
	lo, hi int
	req    string
	load   router.LoadReport
}

// effects is a worker's log while it runs ahead in a window: logging
// is set while it runs ahead, fx holds the effects of its events in the
// order made, each event's closed by fxEnd, next is the first not yet
// replayed, and logged counts the worker's published KV events already
// logged (they stay in worker.events until the window ends).
type effects struct {
	logging bool
	fx      []effect
	next    int
	logged  int
	window  uint64 // the last window the worker ran ahead in

	// The request forward left to the next window (r nil: none).
	added pending
	// indexed: the index has registered the worker (writeIndex).
	indexed bool
}

// effect makes f now or, when w is logging, logs it for the replay.
func (s *simulator) effect(w *worker, f effect) {
	if w.logging {
		w.fx = append(w.fx, f)
		return
	}
	s.apply(w, f)
}

// apply makes effect f of worker w at s.now.
func (s *simulator) apply(w *worker, f effect) {
	switch f.kind {
	case fxApply:
		if s.windowed {
			s.writes = append(s.writes, indexWrite{w, f.lo, f.hi})
			break
		}
		kvevents.Apply(s.index, w.id, w.events[f.lo:f.hi])
	case fxPush:
		s.push(event{at: f.at, kind: f.ev, idx: int32(w.idx)})
	case fxLoad:
		s.router.ObserveLoad(w.id, f.load)
	case fxFirstToken:
		s.router.FirstToken(w.id, f.req)
	case fxFinished:
		s.router.Finished(w.id, f.req)
	case fxDone:
		s.finished++
		s.lastDone = max(s.lastDone, s.now)
	}
}

// replay applies the effects of w's next logged event.
func (s *simulator) replay(w *worker) {
	for {
		if w.next >= len(w.fx) {
			panic(fmt.Sprintf("simulate: worker %s has an event at %v it did not run ahead", w.id, s.now))
		}
		f := &w.fx[w.next]
		w.next++
		if f.kind == fxEnd {
			return
		}
		s.apply(w, *f)
	}
}

// nextOwn returns w's next event: its kind and time, and false if it has
// none.
func (w *worker) nextOwn() (uint8, time.Duration, bool) {
	switch {
	case w.stepping && w.ticking:
		if w.nextReport < w.stepEnd || w.nextReport == w.stepEnd && w.reportSeq < w.stepSeq {
			return evReport, w.nextReport, true
		}
		return evStep, w.stepEnd, true
	case w.stepping:
		return evStep, w.stepEnd, true
	case w.ticking:
		return evReport, w.nextReport, true
	}
	return 0, 0, false
}

// ahead runs w's events due at or before until, logging their effects,
// after the kick an arrival left it.
func (s *simulator) ahead(w *worker, until time.Duration) {
	w.logging = true
	if w.added.r != nil {
		s.add(w, w.added)
		w.added = pending{}
		w.fx = append(w.fx, effect{kind: fxEnd})
	}
	for {
		kind, at, ok := w.nextOwn()
		if !ok || at > until {
			break
		}
		if kind == evStep {
			s.stepDone(w, at)
		} else {
			s.reportTick(w, at)
		}
		w.fx = append(w.fx, effect{kind: fxEnd})
	}
	w.logging = false
}

// due appends to dst the workers with an event queued at or before until:
// the heap's top subtree of such events, walked without popping.
func (s *simulator) due(until time.Duration, window uint64, dst []*worker) []*worker {
	q := s.events
	if len(q) == 0 || q[0].at > until {
		return dst
	}
	stack := append(s.stack[:0], 0)
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if w := s.workers[q[i].idx]; w.window != window {
			w.window = window
			dst = append(dst, w)
		}
		for c := 2*i + 1; c <= 2*i+2 && c < len(q); c++ {
			if q[c].at <= until {
				stack = append(stack, c)
			}
		}
	}
	s.stack = stack
	return dst
}

// runWindowed is run for an aggregated cluster on threads goroutines
// (threads ≥ 2): the same events, effects and report as the serial loop.
func (s *simulator) runWindowed(ctx context.Context, threads int) error {
	total := len(s.cfg.Items)
	progressEvery := max(1, total/100)
	c := newCrew(threads - 1)
	defer c.stop()
	s.windowed = true
	s.stripeBufs = make([]stripeBuf, threads)
	var active []*worker
	for window := uint64(1); ; window++ {
		if ctx.Err() != nil {
			return fmt.Errorf("simulate: stopped at virtual %v after %d of %d requests: %w", s.now, s.finished, total, context.Cause(ctx))
		}
		haveArrival := s.next < total
		if len(s.events) == 0 && !haveArrival && len(s.kicked) == 0 {
			break
		}
		until := time.Duration(math.MaxInt64)
		if haveArrival {
			until = s.arrivalAt(s.next)
		}
		active = active[:0]
		for _, w := range s.kicked {
			if w.window != window {
				w.window = window
				active = append(active, w)
			}
		}
		active = s.due(until, window, active)
		if len(active) > 1 {
			s.shared++
		}
		s.runAhead(c, active, until, func() {
			if haveArrival {
				s.materialise(s.next)
			}
		})
		for _, w := range s.kicked {
			s.replay(w) // at s.now, the arrival's time, as forward
		}
		s.kicked = s.kicked[:0]
		for len(s.events) > 0 && s.events[0].at <= until {
			e := s.events.pop()
			s.now = e.at
			s.nEvents++
			before := s.finished
			s.replay(s.workers[e.idx])
			if s.cfg.Progress != nil && s.finished/progressEvery != before/progressEvery {
				s.cfg.Progress(s.finished, total, s.now)
			}
		}
		s.writeIndex(c)
		for _, w := range active {
			w.fx, w.next = w.fx[:0], 0
			w.core.RecycleEvents(w.events) // all applied by the replays
			clear(w.events)
			w.events, w.logged = w.events[:0], 0
		}
		if haveArrival {
			s.nEvents++
			s.now = until
			s.arrive(s.next)
			s.next++
		}
	}
	return s.conserve()
}

// A crew is the goroutines besides the driver's that share a window's
// work: each helper waits on its own channel for a job and reports on done;
// stop ends them.
type crew struct {
	start []chan func(part int)
	done  chan struct{}
	wg    sync.WaitGroup
}

func newCrew(helpers int) *crew {
	c := &crew{done: make(chan struct{}, helpers)}
	for i := range helpers {
		ch := make(chan func(int))
		c.start = append(c.start, ch)
		c.wg.Go(func() {
			for job := range ch {
				job(i + 1)
				c.done <- struct{}{}
			}
		})
	}
	return c
}

// size is the crew's goroutines, the driver's included.
func (c *crew) size() int { return len(c.start) + 1 }

// do runs job(1) … job(parts-1) on helpers and job(0) on the calling
// goroutine, and returns when all are done. parts ≤ size.
func (c *crew) do(parts int, job func(part int)) {
	for _, ch := range c.start[:parts-1] {
		ch <- job
	}
	job(0)
	for range parts - 1 {
		<-c.done
	}
}

// stop ends the helpers and waits for them.
func (c *crew) stop() {
	for _, ch := range c.start {
		close(ch)
	}
	c.wg.Wait()
}

// runAhead runs the window's workers ahead to until on the crew, taken one
// at a time; the driver first calls also.
func (s *simulator) runAhead(c *crew, work []*worker, until time.Duration, also func()) {
	if len(work) == 0 {
		also()
		return
	}
	var taken atomic.Int64
	// Helpers beyond the work would only wake to find nothing.
	c.do(min(c.size(), len(work)+1), func(part int) {
		if part == 0 {
			also()
		}
		for {
			i := int(taken.Add(1)) - 1
			if i >= len(work) {
				return
			}
			s.ahead(work[i], until)
		}
	})
}

// An indexWrite is a replayed fxApply: worker events [lo, hi) of w.
type indexWrite struct {
	w      *worker
	lo, hi int
}

// minSplitBlocks is the fewest blocks a window's index writes must carry
// for the crew to share them: waking a helper costs about as much as
// writing ~100 blocks (futex wake and wait, measured at 10–30 µs a window
// under load; a block write is one or two cache misses and two atomics).
const minSplitBlocks = 256

// writeIndex applies the window's replayed index writes, in the replay's
// order within each lock stripe of the index and on the crew across them
// (kvindex.Index.Stripe says why that is exact), having first registered
// their workers with the index in the order the writes would. A window with
// a Cleared event, or few blocks, is written in order on the driver.
func (s *simulator) writeIndex(c *crew) {
	blocks, ordered := 0, c.size() == 1
	for _, iw := range s.writes {
		w := iw.w
		for i := range w.events[iw.lo:iw.hi] {
			e := &w.events[iw.lo+i]
			blocks += len(e.Hashes)
			switch e.Kind {
			case kvevents.Stored:
				if !w.indexed {
					s.index.StoreTier(w.id, e.Medium, nil)
					w.indexed = true
				}
			case kvevents.Cleared:
				ordered = true
			}
		}
	}
	if ordered || blocks < minSplitBlocks {
		for _, iw := range s.writes {
			kvevents.Apply(s.index, iw.w.id, iw.w.events[iw.lo:iw.hi])
		}
	} else {
		s.split++
		parts := c.size()
		c.do(parts, func(part int) {
			buf := &s.stripeBufs[part]
			for _, iw := range s.writes {
				for _, e := range iw.w.events[iw.lo:iw.hi] {
					h := buf.hashes[:0]
					for _, x := range e.Hashes {
						if s.index.Stripe(x)%parts == part {
							h = append(h, x)
						}
					}
					if len(h) > 0 {
						buf.ev[0] = kvevents.Event{Kind: e.Kind, Medium: e.Medium, Parent: e.Parent, Hashes: h}
						kvevents.Apply(s.index, iw.w.id, buf.ev[:])
					}
					buf.hashes = h
				}
			}
		})
	}
	clear(s.writes)
	s.writes = s.writes[:0]
}

// A stripeBuf is one crew goroutine's scratch for writeIndex.
type stripeBuf struct {
	hashes []uint64
	ev     [1]kvevents.Event
}

// A promptBuf holds one item's prompt and block hashes.
type promptBuf struct {
	tokens []uint32
	hashes []uint64
}

// materialise points s.buf and s.hbuf at item i's prompt and its block
// hashes, unless they hold them already. Two items in a row get different
// buffers: a windowed run materialises the next arrival's while its
// helpers queue the last one's on its worker.
func (s *simulator) materialise(i int) {
	if s.ready == i+1 {
		return
	}
	p := &s.prompts[i&1]
	p.tokens = s.cfg.Items[i].AppendPrompt(s.pb, p.tokens[:0])
	p.hashes = kvindex.HashChain(p.hashes[:0], "", p.tokens, s.bs)
	s.buf, s.hbuf, s.ready = p.tokens, p.hashes, i+1
}
