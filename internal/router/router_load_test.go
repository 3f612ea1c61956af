package router

import (
	"testing"
	"time"
)

// TestReportBeforeFinishIgnored: a load report that arrived before the
// worker's last tracked request finished still counts that request, so it
// must not make the worker look busy; the next report counts again.
func TestReportBeforeFinishIgnored(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := newTracker(time.Second, func() time.Time { return now })
	tr.started("w", "r1", 100)
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
	tr.started("w", "mine", 10)
	tr.observe("w", LoadReport{QueuedPrefillBlocks: 1000, Waiting: 5}, now) // 990 from other frontends
	now = now.Add(10 * time.Millisecond)
	tr.finished("w", "mine")
	ws := []Worker{{ID: "w"}}
	tr.fill(ws, now)
	if got := ws[0].Load.QueuedPrefillBlocks; got != 990 {
		t.Errorf("queued prefill blocks = %d, want 990 (the report minus the finished local request)", got)
	}
}
