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
//     loop would have made them. Whatever the order of the index's or the
//     router's insides, they see the serial run's calls in the serial order.
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
	c := newCrew(s, threads-1)
	defer c.stop()
	s.windowed = true
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
		c.run(active, until, func() {
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

// A crew is the goroutines besides the driver's that run workers ahead.
// Each helper waits on its own channel for a window and reports on done;
// stop ends them.
type crew struct {
	s     *simulator
	start []chan struct{}
	done  chan struct{}
	wg    sync.WaitGroup

	// The window being run: written by the driver before it signals.
	work  []*worker
	until time.Duration
	taken atomic.Int64
}

func newCrew(s *simulator, helpers int) *crew {
	c := &crew{s: s, done: make(chan struct{}, helpers)}
	for range helpers {
		ch := make(chan struct{})
		c.start = append(c.start, ch)
		c.wg.Go(func() {
			for range ch {
				c.take()
				c.done <- struct{}{}
			}
		})
	}
	return c
}

// take runs workers ahead until none is left untaken.
func (c *crew) take() {
	for {
		i := int(c.taken.Add(1)) - 1
		if i >= len(c.work) {
			return
		}
		c.s.ahead(c.work[i], c.until)
	}
}

// run runs work ahead to until on the crew and the calling goroutine,
// which first calls also, and returns when all of it is done.
func (c *crew) run(work []*worker, until time.Duration, also func()) {
	if len(work) == 0 {
		also()
		return
	}
	c.work, c.until = work, until
	c.taken.Store(0)
	// Helpers beyond the work would only wake to find nothing.
	n := min(len(c.start), len(work))
	for _, ch := range c.start[:n] {
		ch <- struct{}{}
	}
	also()
	c.take()
	for range n {
		<-c.done
	}
	c.work = nil
}

// stop ends the helpers and waits for them.
func (c *crew) stop() {
	for _, ch := range c.start {
		close(ch)
	}
	c.wg.Wait()
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
