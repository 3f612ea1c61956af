package frontend

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDriftJudgement(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var ds driftState
	// The bridge: every chain an orphan, every removal unknown.
	if ch := ds.observe(t0, Drift{Events: 300, OrphanParent: 16, RemovedUnknownBlock: 246}); !ch.changed || !ch.inconsistent {
		t.Fatalf("a bridge dropping 262 of 300 events is not inconsistent: %+v", ch)
	}
	_, bad, cause := ds.state()
	if !bad || !strings.Contains(cause, "dropped 262 of 300 engine events") || !strings.Contains(cause, "orphan parents 16") || !strings.Contains(cause, "removals of unknown blocks 246") {
		t.Errorf("cause %q", cause)
	}
	// Fixed: the next windows drop nothing.
	events := uint64(300)
	for i := 1; i <= 12; i++ {
		events += 100
		ds.observe(t0.Add(time.Duration(i)*driftSampleGap), Drift{Events: events, OrphanParent: 16, RemovedUnknownBlock: 246})
	}
	if _, bad, cause := ds.state(); bad {
		t.Errorf("still inconsistent after %v of clean events: %s", 12*driftSampleGap, cause)
	}

	// A small share (under 5%) is honest: an engine that evicts a block
	// the bridge never saw stored, once in a while.
	var ok driftState
	for i := range 20 {
		if ch := ok.observe(t0.Add(time.Duration(i)*driftSampleGap), Drift{Events: uint64(1000 * (i + 1)), RemovedUnknownBlock: uint64(30 * (i + 1)), SkippedGroup: uint64(500 * (i + 1))}); ch.changed {
			t.Fatalf("3%% drops, skipped groups aside, made the bridge inconsistent: %s", ch.cause)
		}
	}
	// A restarted bridge counts again from zero.
	var rs driftState
	rs.observe(t0, Drift{Events: 5000, BadEvent: 2000})
	rs.observe(t0.Add(20*time.Minute), Drift{Events: 500000, BadEvent: 2000})
	if _, bad, _ := rs.state(); bad {
		t.Fatal("an old burst of drops still counts")
	}
	if ch := rs.observe(t0.Add(20*time.Minute+time.Second), Drift{Events: 100, BadEvent: 40}); !ch.inconsistent {
		t.Errorf("a restarted bridge dropping 40 of 100 events is not inconsistent: %+v", ch)
	}
}

// TestDriftingBridgeInHealth: a bridge's counters show in /health, and a
// bridge dropping a share of its events makes its worker inconsistent
// with the counters in the cause, routed by the approximate index.
func TestDriftingBridgeInHealth(t *testing.T) {
	w := newFakeWorker(t, "w-a")
	wk := w.worker(RoleAggregated)
	wk.Drift = &Drift{Events: 300, OrphanParent: 16, RemovedUnknownBlock: 246}
	h := newHarness(t, Config{}, Deps{Events: healthyEvents{}}, wk)
	hl := h.s.Health()
	wh := hl.Workers[0]
	if wh.Drift == nil || wh.Drift.OrphanParent != 16 || wh.Events.State != StateInconsistent || !strings.Contains(wh.Events.Cause, "removals of unknown blocks 246") {
		t.Fatalf("health worker %+v, events %+v", wh, wh.Events)
	}
	if hl.Status != HealthDegraded {
		t.Errorf("status %s, want degraded", hl.Status)
	}
	h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x","max_tokens":2}`)
	if picks := h.router.recorded(); !slices.Equal(picks[len(picks)-1].IndexSuspect, []string{"w-a"}) {
		t.Errorf("router got IndexSuspect %v, want [w-a]", picks[len(picks)-1].IndexSuspect)
	}

	// Switchyard's own workers report no drift: nothing changes for them.
	b := newFakeWorker(t, "w-b")
	h2 := newHarness(t, Config{}, Deps{Events: healthyEvents{}}, b.worker(RoleAggregated))
	if wh := h2.s.Health().Workers[0]; wh.Drift != nil || wh.Events.State != StateHealthy {
		t.Errorf("a worker without a bridge: drift %+v, events %s", wh.Drift, wh.Events.State)
	}
}
