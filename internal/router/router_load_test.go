package router

import (
	"fmt"
	"math/rand/v2"
	"slices"
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

// walkedEffective is tracker.effective as it was before the finished
// requests' sum was kept up to date: it walks the list on every call. The
// test below holds the kept sum to it.
func walkedEffective(t *tracker, w *workerLoad, now time.Time) Load {
	l := w.tracked
	if !w.at.IsZero() && now.Sub(w.at) <= t.reportTTL {
		rep := w.reported
		subtracted := false
		for _, f := range w.finished {
			if f.at.After(w.at.Add(-reportGrace)) {
				rep.QueuedPrefillBlocks -= f.queued
				rep.ActiveDecodeBlocks -= f.decoding
				rep.InFlight--
				subtracted = true
			}
		}
		if subtracted && rep.InFlight <= 0 {
			rep.QueuedPrefillBlocks, rep.ActiveDecodeBlocks = 0, 0
		}
		l.QueuedPrefillBlocks = max(l.QueuedPrefillBlocks, rep.QueuedPrefillBlocks)
		l.ActiveDecodeBlocks = max(l.ActiveDecodeBlocks, rep.ActiveDecodeBlocks)
		l.InFlight = max(l.InFlight, rep.InFlight)
	}
	return l
}

// TestEffectiveKeptSumEqualsWalk drives a tracker through a random history
// of starts, first tokens, finishes and load reports (taken before and after
// finishes, fresh and stale, with and without TakenAt) at random times and
// checks, after every operation and at several reading times, that the
// effective load from the kept sum of finished requests equals the one from
// walking them.
func TestEffectiveKeptSumEqualsWalk(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := newTracker(time.Second, func() time.Time { return now })
	rng := rand.New(rand.NewPCG(3, 5))
	names := []string{"a", "b", "c"}
	var live []string
	subtracted := 0
	for op := range 20_000 {
		w := names[rng.IntN(len(names))]
		switch k := rng.IntN(100); {
		case k < 30:
			id := fmt.Sprint("r", op)
			tr.started(w, id, rng.IntN(50), rng.IntN(80))
			live = append(live, w+"/"+id)
		case k < 45 && len(live) > 0:
			wid := live[rng.IntN(len(live))]
			tr.firstToken(wid[:1], wid[2:])
		case k < 70 && len(live) > 0:
			i := rng.IntN(len(live))
			wid := live[i]
			live = append(live[:i], live[i+1:]...)
			tr.finished(wid[:1], wid[2:])
		case k < 90:
			rep := LoadReport{QueuedPrefillBlocks: rng.IntN(200), ActiveDecodeBlocks: rng.IntN(400), Running: rng.IntN(5), Waiting: rng.IntN(3)}
			if rng.IntN(2) == 0 {
				rep.TakenAt = now.Add(-time.Duration(rng.IntN(60)) * time.Millisecond)
			}
			tr.observe(w, rep, now)
		default:
			now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
		}
		now = now.Add(time.Duration(rng.IntN(3)) * time.Millisecond)
		for _, name := range names {
			wl := tr.workers[name]
			if wl == nil {
				continue
			}
			for _, later := range []time.Duration{0, 500 * time.Millisecond, 1100 * time.Millisecond} {
				got, want := tr.effective(wl, now.Add(later)), walkedEffective(tr, wl, now.Add(later))
				if got != want {
					t.Fatalf("op %d, worker %s, %v later: effective %+v, walking the finished list %+v", op, name, later, got, want)
				}
			}
			if wl.since.n > 0 {
				subtracted++
			}
		}
	}
	if subtracted == 0 {
		t.Errorf("no finished request was ever subtracted from a report: the history tests nothing")
	}
}

// TestFinishedSumsMatchAWalk drives one worker's finished list through
// random finishes, reports (TakenAt before and after the last), and clock
// steps back, and checks after every step that the list and its sums equal
// those of the plain algorithm: filter the whole list at each finish, and
// sum by walking it.
func TestFinishedSumsMatchAWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	now := time.Unix(1000, 0)
	tr := newTracker(time.Second, func() time.Time { return now })
	keep := tr.reportTTL + reportGrace
	var ref []finishedReq // filtered as the plain algorithm does
	var at time.Time      // the last report's time
	byTime := func(a, b finishedReq) int { return a.at.Compare(b.at) }
	for step := range 5000 {
		switch r := rng.IntN(100); {
		case r < 3:
			now = now.Add(-time.Duration(rng.IntN(50)) * time.Millisecond) // the clock went back
		case r < 10 && step/500%2 == 0: // reports stop for a while: what they counted expires
			taken := now.Add(-time.Duration(rng.IntN(300)) * time.Millisecond)
			tr.observe("w", LoadReport{TakenAt: taken}, now)
			at = tr.workers["w"].at
		default:
			id := fmt.Sprint(step)
			q, h := rng.IntN(50), rng.IntN(50)
			tr.started("w", id, q, h)
			tr.finished("w", id)
			kept := ref[:0]
			for _, f := range ref {
				if now.Sub(f.at) <= keep {
					kept = append(kept, f)
				}
			}
			ref = append(kept, finishedReq{at: now, queued: q, decoding: max(h, q)})
		}
		now = now.Add(time.Duration(rng.IntN(8)) * time.Millisecond)
		w := tr.workers["w"]
		if w == nil {
			continue
		}
		var want finishedSum
		for _, f := range ref {
			if f.at.After(at.Add(-reportGrace)) {
				want.add(f, 1)
			}
		}
		if w.since != want {
			t.Fatalf("step %d: since %+v, a walk gives %+v", step, w.since, want)
		}
		sorted := slices.Clone(ref)
		slices.SortStableFunc(sorted, byTime)
		if !slices.Equal(w.finished, sorted) {
			t.Fatalf("step %d: the list holds %d finishes, the plain algorithm %d", step, len(w.finished), len(sorted))
		}
	}
}
