package frontend

import (
	"fmt"
	"sync"
	"time"
)

// Drift is what a bridge received from its engine and could not index, as
// counted since the bridge started (every field only grows). Switchyard's
// own workers report none.
type Drift struct {
	Events              uint64 `json:"events"`                // engine events received
	OrphanParent        uint64 `json:"orphan_parent"`         // stored blocks whose parent the bridge did not hold
	RemovedUnknownBlock uint64 `json:"removed_unknown_block"` // removed blocks the bridge did not hold
	BadEvent            uint64 `json:"bad_event"`             // events inconsistent in themselves, not indexed
	SkippedGroup        uint64 `json:"skipped_group"`         // other KV cache groups: skipped on purpose, not drops
	Rebuilds            uint64 `json:"rebuilds"`              // batches lost for good: the worker's index was cleared
}

// Dropped is the events the bridge could not apply as the engine meant.
func (d Drift) Dropped() uint64 { return d.OrphanParent + d.RemovedUnknownBlock + d.BadEvent }

// A bridge drifts when, over its window (since it started, then the last
// driftWindow or so), it dropped at least driftMinDropped events making
// more than 1/driftShare of those it received; it recovers when a window
// of at least driftMinEvents events dropped under a tenth of that share.
const (
	driftWindow     = 60 * time.Second
	driftSampleGap  = 10 * time.Second // samples kept at most this often
	driftMinDropped = 16
	driftShare      = 20 // 5%
	driftMinEvents  = 64
)

type driftSample struct {
	at              time.Time
	events, dropped uint64
}

// driftState judges one worker's bridge from its reported counters.
type driftState struct {
	mu           sync.Mutex // guards everything below
	samples      []driftSample
	last         Drift
	inconsistent bool
	cause        string
}

// observe records the counters d seen at now and re-judges the bridge. It
// returns a change of state for the log.
func (ds *driftState) observe(now time.Time, d Drift) agreeChange {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if d.Events < ds.last.Events || d.Dropped() < ds.last.Dropped() {
		// The bridge restarted: its counters start again, and so does
		// the window.
		ds.samples = ds.samples[:0]
	}
	ds.last = d
	if len(ds.samples) == 0 {
		// The first window runs from the bridge's start: the counters
		// are cumulative.
		ds.samples = append(ds.samples, driftSample{at: now})
	}
	if n := len(ds.samples); now.Sub(ds.samples[n-1].at) >= driftSampleGap {
		ds.samples = append(ds.samples, driftSample{at: now, events: d.Events, dropped: d.Dropped()})
		for len(ds.samples) > 2 && now.Sub(ds.samples[1].at) >= driftWindow {
			ds.samples = ds.samples[1:]
		}
	}
	base := ds.samples[0]
	events, dropped := d.Events-base.events, d.Dropped()-base.dropped
	var ch agreeChange
	switch {
	case !ds.inconsistent && dropped >= driftMinDropped && dropped*driftShare > events:
		ds.inconsistent = true
		ds.cause = fmt.Sprintf("bridge drift: the bridge dropped %d of %d engine events in %v (orphan parents %d, removals of unknown blocks %d, bad events %d; skipped groups %d, rebuilds %d since it started)",
			dropped, events, now.Sub(base.at).Round(time.Second), d.OrphanParent, d.RemovedUnknownBlock, d.BadEvent, d.SkippedGroup, d.Rebuilds)
		ch = agreeChange{changed: true, inconsistent: true, cause: ds.cause}
	case ds.inconsistent && events >= driftMinEvents && dropped*driftShare*10 <= events:
		ds.inconsistent = false
		ch = agreeChange{changed: true, cause: fmt.Sprintf("bridge drift over: %d of the last %d engine events dropped", dropped, events)}
		ds.cause = ""
	}
	return ch
}

func (ds *driftState) state() (Drift, bool, string) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return ds.last, ds.inconsistent, ds.cause
}

// noteDrift judges the bridge counters wk reports, if any.
func (s *Server) noteDrift(wk Worker) {
	if wk.Drift == nil {
		return
	}
	ch := s.workerState(wk.ID).drift.observe(time.Now(), *wk.Drift)
	switch {
	case ch.changed && ch.inconsistent:
		s.log.Warn("worker's bridge drops a share of its engine's KV events; routing it by the approximate index", "worker", wk.ID, "cause", ch.cause)
	case ch.changed:
		s.log.Info("worker's bridge indexes its engine's KV events again", "worker", wk.ID, "cause", ch.cause)
	}
}
