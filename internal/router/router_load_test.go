package router

import (
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

// TestReportBeforeFinishIgnored: a load report that arrived before the
// worker's last tracked request finished still counts that request, so it
// must not make the worker look busy; the next report counts again.
func TestReportBeforeFinishIgnored(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := newTracker(time.Second, func() time.Time { return now })
	tr.started("w", "r1", 100, 100)
	tr.firstToken("w", "r1")
	tr.observe("w", LoadReport{ActiveDecodeBlocks: 100, Running: 1}, now) // counts r1
	now = now.Add(10 * time.Millisecond)
	tr.finished("w", "r1")
	ws := []Worker{{ID: "w"}}
	tr.fill(ws, now)
	if got := ws[0].Load.ActiveDecodeBlocks; got != 0 {
		t.Errorf("after finish, active decode blocks = %d, want 0 (stale report ignored)", got)
	}
	now = now.Add(250 * time.Millisecond)
	tr.observe("w", LoadReport{ActiveDecodeBlocks: 40, Running: 1}, now) // another frontend's load
	tr.fill(ws, now)
	if got := ws[0].Load.ActiveDecodeBlocks; got != 40 {
		t.Errorf("fresh report after finish: active decode blocks = %d, want 40", got)
	}
}

// TestReportKeepsOtherLoadAfterLocalFinish: a local finish removes only its
// own share from a report; load the report saw from elsewhere stays.
func TestReportKeepsOtherLoadAfterLocalFinish(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := newTracker(time.Second, func() time.Time { return now })
	tr.started("w", "mine", 10, 10)
	tr.observe("w", LoadReport{QueuedPrefillBlocks: 1000, Waiting: 5}, now) // 990 from other frontends
	now = now.Add(10 * time.Millisecond)
	tr.finished("w", "mine")
	ws := []Worker{{ID: "w"}}
	tr.fill(ws, now)
	if got := ws[0].Load.QueuedPrefillBlocks; got != 990 {
		t.Errorf("queued prefill blocks = %d, want 990 (the report minus the finished local request)", got)
	}
}

// TestReportOfCachedRequestFullySubtracted: a request that hit the cache
// computed few blocks but held its whole prompt; a report taken while it
// decoded counts all of them, and all of them come off once it finishes.
func TestReportOfCachedRequestFullySubtracted(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := newTracker(time.Second, func() time.Time { return now })
	tr.started("w", "r", 5, 95)
	tr.firstToken("w", "r")
	tr.observe("w", LoadReport{ActiveDecodeBlocks: 96, Running: 1}, now)
	now = now.Add(10 * time.Millisecond)
	tr.finished("w", "r")
	ws := []Worker{{ID: "w"}}
	tr.fill(ws, now)
	if got := ws[0].Load.ActiveDecodeBlocks; got > 1 {
		t.Errorf("after the cached request finished: active decode blocks %d, want ≈ 0 (the e2e routing table lost 10 of 60 hits to this)", got)
	}
}

// TestReportFromPrefillPhaseSubtracted: a report taken while a request was
// still queued for prefill stops counting it once the request finishes.
func TestReportFromPrefillPhaseSubtracted(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := newTracker(time.Second, func() time.Time { return now })
	tr.started("w", "r", 115, 115)
	tr.observe("w", LoadReport{QueuedPrefillBlocks: 115, Waiting: 1}, now)
	now = now.Add(5 * time.Millisecond)
	tr.firstToken("w", "r")
	now = now.Add(5 * time.Millisecond)
	tr.finished("w", "r")
	ws := []Worker{{ID: "w"}}
	tr.fill(ws, now)
	if l := ws[0].Load; l.QueuedPrefillBlocks != 0 || l.ActiveDecodeBlocks != 0 {
		t.Errorf("after finish: %+v, want no load", l)
	}
}

// TestColdPrefixGoesToEmptiestCache: with cost and load tied, kv places a
// new prefix on the worker whose cache holds the fewest blocks.
func TestColdPrefixGoesToEmptiestCache(t *testing.T) {
	ix := kvindex.New(kvindex.Config{})
	ix.Store("a", []uint64{101, 102, 103, 104})
	ix.Store("b", []uint64{201})
	r, err := New(Config{Index: ix})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ { // rotation alone would alternate
		d, err := r.Pick(&Request{Hashes: []uint64{uint64(900 + i)}, BlockSize: 16}, []Worker{{ID: "a", EventsHealthy: true}, {ID: "b", EventsHealthy: true}})
		if err != nil {
			t.Fatal(err)
		}
		if d.Worker != "b" {
			t.Errorf("pick %d: %s, want b (emptier cache)", i, d.Worker)
		}
	}
}

// TestReportResidueDropped: once every request a report saw has finished,
// its leftover blocks (partial and generated blocks the frontend does not
// count) are not load.
func TestReportResidueDropped(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := newTracker(time.Second, func() time.Time { return now })
	tr.started("w", "r", 113, 113)
	tr.firstToken("w", "r")
	tr.observe("w", LoadReport{ActiveDecodeBlocks: 115, Running: 1}, now) // partial + generated blocks
	now = now.Add(5 * time.Millisecond)
	tr.finished("w", "r")
	ws := []Worker{{ID: "w"}}
	tr.fill(ws, now)
	if l := ws[0].Load; l.ActiveDecodeBlocks != 0 {
		t.Errorf("after the only request finished: %+v, want no decode load", l)
	}
}
