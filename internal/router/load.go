package router

import (
	"slices"
	"sync"
	"time"
)

// LoadReport is what a worker publishes about itself, at least every 250 ms.
type LoadReport struct {
	QueuedPrefillBlocks int // blocks of prompts waiting for or in prefill
	ActiveDecodeBlocks  int // KV blocks of running (decoding) requests
	Running             int // requests decoding
	Waiting             int // requests queued
	// TakenAt is when the worker took the report, by its clock; zero means
	// unknown (the arrival time is used). Within a second of the arrival it
	// is trusted: delivery can lag by tens of milliseconds on a busy host,
	// and a report must be compared with local finishes by when it was
	// taken, not when it arrived.
	TakenAt time.Time
}

// tracker keeps each worker's load as this frontend sees it (its own
// in-flight requests) and as the worker last reported it.
//
// The effective load is the larger of the two, field by field, while the
// report is fresh (reportTTL). Why max and not a blend: a report counts
// requests from every frontend and the worker's real queue, which tracking
// cannot see; tracking counts requests sent since the report, which the
// report cannot see. Each undercounts in its own way, so the larger is the
// better estimate, and it never lets one stale source hide load. A stale
// report is ignored, so a worker whose reports stop is judged on tracking
// alone.
type tracker struct {
	reportTTL time.Duration
	now       func() time.Time

	// mu guards workers, reqs and gen. Pick holds it from reading the
	// loads to booking its choice, so that concurrent Picks see each
	// other's bookings.
	mu      sync.Mutex
	workers map[string]*workerLoad
	// reqs holds the in-flight requests by worker and request ID: a
	// disaggregated request is booked on its decode and its prefill
	// worker at once, under one ID.
	reqs map[reqKey]inflightReq
	// gen counts deletions from workers: a *workerLoad resolved under
	// one gen stays the worker's entry while gen is unchanged.
	gen uint64
}

type workerLoad struct {
	tracked  Load
	reported Load
	at       time.Time // when the report arrived; zero: none
	// finished lists requests tracked here that finished recently. A
	// report still counts those that finished after it was taken (up to
	// reportGrace before it arrived), so their load is subtracted from it:
	// otherwise a worker that just finished a long prompt looks busy for a
	// whole report TTL and sequential repeated-prefix traffic is sent away
	// from the cache that holds it (seen in the e2e routing table: 59 of
	// 60 hits). Subtracting rather than discarding the report keeps the
	// load other frontends put on the worker visible under steady traffic.
	//
	// finished is in order of finish time (finishes are stamped under t.mu
	// from a monotone clock), so what expires is a prefix and what a report
	// may still count is a suffix: a finish costs O(1) amortised. Walking
	// the whole list on every finish made the tracker 13% of a frontend's
	// CPU at 2,000 requests/s, where the list holds a report TTL of them.
	finished []finishedReq
	// since sums finished[sinceFrom:], the finished requests that a report
	// taken at at may still count (those that finished after at less
	// reportGrace): what effective subtracts from the report. Kept up to
	// date whenever finished or at changes, so that pricing a thousand
	// candidates per request does not walk each one's list (5.8% of a
	// 1,000-worker simulation's CPU did).
	since     finishedSum
	sinceFrom int
}

// finishedSum is the load of some finished requests.
type finishedSum struct {
	queued, decoding, n int
}

// sumSince recomputes w.since and w.sinceFrom from the whole list.
// t.mu must be held.
func (w *workerLoad) sumSince() {
	w.since = finishedSum{}
	cut := w.at.Add(-reportGrace)
	w.sinceFrom = len(w.finished)
	for i := len(w.finished) - 1; i >= 0 && w.finished[i].at.After(cut); i-- {
		w.since.add(w.finished[i], 1)
		w.sinceFrom = i
	}
}

func (s *finishedSum) add(f finishedReq, sign int) {
	s.queued += sign * f.queued
	s.decoding += sign * f.decoding
	s.n += sign
}

// addFinished records f, finished at now, and forgets the finished
// requests older than keep before now. t.mu must be held.
func (w *workerLoad) addFinished(f finishedReq, now time.Time, keep time.Duration) {
	if n := len(w.finished); n > 0 && f.at.Before(w.finished[n-1].at) {
		// The clock went back: filter the whole list, put it back in
		// order and recount. The sums do not depend on the order.
		kept := w.finished[:0]
		for _, old := range w.finished {
			if now.Sub(old.at) <= keep {
				kept = append(kept, old)
			}
		}
		w.finished = append(kept, f)
		slices.SortStableFunc(w.finished, func(a, b finishedReq) int { return a.at.Compare(b.at) })
		w.sumSince()
		return
	}
	drop := 0
	for drop < len(w.finished) && now.Sub(w.finished[drop].at) > keep {
		if drop >= w.sinceFrom {
			w.since.add(w.finished[drop], -1)
		}
		drop++
	}
	if drop > 0 {
		// Copy down rather than reslice, so the array does not creep.
		w.finished = w.finished[:copy(w.finished, w.finished[drop:])]
		w.sinceFrom = max(0, w.sinceFrom-drop)
	}
	w.finished = append(w.finished, f)
	if f.at.After(w.at.Add(-reportGrace)) {
		w.since.add(f, 1)
	} else {
		w.sinceFrom = len(w.finished)
	}
}

type finishedReq struct {
	at       time.Time
	queued   int // prefill blocks it still had queued when it finished
	decoding int // decode blocks it held
}

// reportGrace bounds how long a load report takes from the worker to the
// frontend; reports arriving within it after a finish may predate it.
const reportGrace = 25 * time.Millisecond

type reqKey struct{ worker, id string }

type inflightReq struct {
	blocks   int // prefill blocks: queued until the first token, then tracked decode load
	held     int // blocks the worker's reports count for it while it decodes
	decoding bool
}

func newTracker(reportTTL time.Duration, now func() time.Time) *tracker {
	return &tracker{reportTTL: reportTTL, now: now, workers: map[string]*workerLoad{}, reqs: map[reqKey]inflightReq{}}
}

func (t *tracker) worker(id string) *workerLoad {
	w := t.workers[id]
	if w == nil {
		w = &workerLoad{}
		t.workers[id] = w
	}
	return w
}

func (t *tracker) started(worker, requestID string, prefillBlocks, promptBlocks int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.book(worker, requestID, prefillBlocks, promptBlocks)
}

// book counts a request on worker with prefillBlocks to compute and
// promptBlocks held once it decodes; for a request already booked there,
// it updates the blocks until its first token (they are fixed after).
// t.mu must be held.
func (t *tracker) book(worker, requestID string, prefillBlocks, promptBlocks int) {
	k := reqKey{worker, requestID}
	r, ok := t.reqs[k]
	if ok && r.decoding {
		return
	}
	w := t.worker(worker)
	if !ok {
		w.tracked.InFlight++
	}
	w.tracked.QueuedPrefillBlocks += prefillBlocks - r.blocks
	t.reqs[k] = inflightReq{blocks: prefillBlocks, held: max(promptBlocks, prefillBlocks)}
}

func (t *tracker) firstToken(worker, requestID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := reqKey{worker, requestID}
	r, ok := t.reqs[k]
	if !ok || r.decoding {
		return
	}
	r.decoding = true
	t.reqs[k] = r
	w := t.worker(worker)
	w.tracked.QueuedPrefillBlocks -= r.blocks
	w.tracked.ActiveDecodeBlocks += r.blocks
}

func (t *tracker) finished(worker, requestID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, w, ok := t.untrack(worker, requestID)
	if !ok {
		return
	}
	now := t.now()
	// A report from before its end may have caught it in either phase:
	// queued for prefill (its prefill blocks) or decoding (every block it
	// held). Which one is unknown, so both come off such a report; the
	// floor at the tracked load keeps an over-correction harmless. (A
	// report from its prefill phase that kept counting it made a worker
	// look busy to the next cold prefix, and the e2e routing table put four
	// prefixes on one worker: 48 of 60 hits.)
	// Keep only what a fresh report could still count.
	w.addFinished(finishedReq{at: now, queued: r.blocks, decoding: r.held}, now, t.reportTTL+reportGrace)
}

func (t *tracker) dropped(worker, requestID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.untrack(worker, requestID)
}

// untrack takes a request off its worker's tracked load, in whichever phase
// it is. It reports false for a request this tracker does not hold for that
// worker. t.mu must be held.
func (t *tracker) untrack(worker, requestID string) (inflightReq, *workerLoad, bool) {
	k := reqKey{worker, requestID}
	r, ok := t.reqs[k]
	if !ok {
		return inflightReq{}, nil, false
	}
	delete(t.reqs, k)
	w := t.worker(worker)
	if r.decoding {
		w.tracked.ActiveDecodeBlocks -= r.blocks
	} else {
		w.tracked.QueuedPrefillBlocks -= r.blocks
	}
	w.tracked.InFlight--
	return r, w, true
}

func (t *tracker) observe(worker string, r LoadReport, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.worker(worker)
	w.reported = Load{
		QueuedPrefillBlocks: r.QueuedPrefillBlocks,
		ActiveDecodeBlocks:  r.ActiveDecodeBlocks,
		InFlight:            r.Running + r.Waiting,
	}
	w.at = now
	if at := r.TakenAt; !at.IsZero() && at.Before(now.Add(time.Millisecond)) && now.Sub(at) < time.Second {
		w.at = at
	}
	w.sumSince()
}

// fill sets the Load of every worker in ws. One lock for the whole list.
func (t *tracker) fill(ws []Worker, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range ws {
		ws[i].Load = t.effective(t.workers[ws[i].ID], now)
	}
}

// fillResolved is fill for the candidates res was prepared for (res.prepare
// on ws): it looks each worker's entry up by name only when res has none
// from the current gen, creating entries for workers not seen yet (an
// empty entry's load is that of an unknown worker).
// t.mu must be held.
func (t *tracker) fillResolved(ws []Worker, now time.Time, res *resolved) {
	if !res.tok || res.tgen != t.gen {
		res.loads = res.loads[:0]
		for i := range ws {
			res.loads = append(res.loads, t.worker(ws[i].ID))
		}
		res.tok, res.tgen = true, t.gen
	}
	for i := range ws {
		ws[i].Load = t.effective(res.loads[i], now)
	}
}

// effective is w's load as Pick uses it at now: the tracked load, raised
// to a fresh report's (less what finished since it was taken). nil: an
// unknown worker. t.mu must be held.
func (t *tracker) effective(w *workerLoad, now time.Time) Load {
	if w == nil {
		return Load{}
	}
	l := w.tracked
	if !w.at.IsZero() && now.Sub(w.at) <= t.reportTTL {
		rep := w.reported
		rep.QueuedPrefillBlocks -= w.since.queued
		rep.ActiveDecodeBlocks -= w.since.decoding
		rep.InFlight -= w.since.n
		if w.since.n > 0 && rep.InFlight <= 0 {
			// Every request the report saw has finished since: what
			// is left of its blocks is rounding (the worker counts
			// partial and generated blocks), not load. A stray block
			// here tipped cold prefixes onto the fuller cache.
			rep.QueuedPrefillBlocks, rep.ActiveDecodeBlocks = 0, 0
		}
		l.QueuedPrefillBlocks = max(l.QueuedPrefillBlocks, rep.QueuedPrefillBlocks)
		l.ActiveDecodeBlocks = max(l.ActiveDecodeBlocks, rep.ActiveDecodeBlocks)
		l.InFlight = max(l.InFlight, rep.InFlight)
	}
	return l
}

func (t *tracker) forget(worker string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.workers, worker)
	t.gen++
	for k := range t.reqs {
		if k.worker == worker {
			delete(t.reqs, k)
		}
	}
}
