package simulate

import (
	"slices"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/bench"
	"github.com/switchyard-llm/switchyard/internal/gate"
	"github.com/switchyard-llm/switchyard/internal/linkemu"
)

// ttftError returns the median of measured − predicted TTFT, in seconds,
// over the successful requests prefilled on side ("local" or "remote"),
// and how many there were.
func ttftError(recs []bench.Record, side string) (median float64, n int) {
	var errs []float64
	for _, r := range recs {
		if r.Outcome == bench.OutcomeOK && r.Prefill == side && r.PredictedTTFTMs != nil {
			errs = append(errs, r.TTFTS-*r.PredictedTTFTMs/1000)
		}
	}
	if len(errs) == 0 {
		return 0, 0
	}
	slices.Sort(errs)
	return errs[len(errs)/2], len(errs)
}

// busy70b is the README's busy-link cluster: llama-3.1-70b on H100, two
// decode workers and one prefill worker, the Mooncake trace at twice its
// rate, which queues tens of seconds of prefill on every worker.
func busy70b(t testing.TB, n int, rate linkemu.Rate, mode gate.Mode) Config {
	t.Helper()
	c := DefaultConfig()
	c.Items = traceItems(t, n, 2)
	c.Engine.Model, c.Engine.GPU = "llama-3.1-70b", "h100"
	c.Workers, c.PrefillWorkers, c.LinkRate, c.Disagg = 2, 1, rate, mode
	return c
}

// TestGatePredictsLocalQueue checks the gate's local TTFT prediction on
// workers with deep prefill queues: the median request finishes within a
// quarter of the median TTFT of its prediction. Pricing the queue as one
// prompt of all its tokens over-predicted by a median 16 s of 19.5 s.
func TestGatePredictsLocalQueue(t *testing.T) {
	rep := run(t, busy70b(t, 300, linkemu.Rate(125e6), gate.ModeNever))
	a := rep.Runs[0].Aggregate
	med, n := ttftError(rep.Runs[0].Records, "local")
	if n < 250 || a.TTFTP50S == nil {
		t.Fatalf("%d local requests with a prediction, TTFT p50 %v: want 250 or more", n, a.TTFTP50S)
	}
	if p50 := *a.TTFTP50S; med < -0.25*p50 || med > 0.25*p50 {
		t.Errorf("local TTFT measured − predicted: median %.1f s, TTFT p50 %.1f s: want within ±25%%", med, p50)
	}
}

// TestGateLinkEstimateAtLineRate checks that the gate's estimate of a busy
// link stays at the rate the link moves, although the transfers that teach
// it share the link: counted at face value they pulled it to a fraction of
// that, and the gate's backlog, which already queues each transfer behind
// the others, counted the sharing twice.
func TestGateLinkEstimateAtLineRate(t *testing.T) {
	c := busy70b(t, 300, linkemu.Rate(25e9/8), gate.ModeAuto)
	s := runSimulator(t, &c)
	want := c.LinkRate.TCPGoodput().BytesPerSecond()
	for _, e := range s.gate.Links().Snapshot() {
		if e.Samples < 20 {
			t.Errorf("%s→%s: %d samples, want 20 or more (a busy link)", e.From, e.To, e.Samples)
		}
		r := e.BytesPerSec / want
		t.Logf("%s→%s: estimate %.4g B/s after %d samples, ratio %.3f", e.From, e.To, e.BytesPerSec, e.Samples, r)
		if r < 0.9 || r > 1.05 {
			t.Errorf("%s→%s: estimate %.4g B/s after %d samples, the link moves %.4g (ratio %.2f)", e.From, e.To, e.BytesPerSec, e.Samples, want, r)
		}
	}
}

// TestRouterCountsNothingAfterRun: every request the router booked at
// Pick on this busy disaggregated cluster, decode and prefill pools alike,
// was started and finished or released by the end: the local prefills
// released their prefill pick, the remote ones kept both.
func TestRouterCountsNothingAfterRun(t *testing.T) {
	c := busy70b(t, 100, linkemu.Rate(25e9/8), gate.ModeAuto)
	s := runSimulator(t, &c)
	_, local := ttftError(s.recs, "local")
	_, remote := ttftError(s.recs, "remote")
	if local == 0 || remote == 0 {
		t.Fatalf("%d local and %d remote prefills, want some of each", local, remote)
	}
	if n := s.router.InFlight(); n != 0 {
		t.Errorf("router holds %d requests in flight after the run, want 0", n)
	}
}
