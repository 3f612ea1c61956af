package gate

import (
	"math"
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestLinkEstimatorProbeLifecycle(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	g := newGate(t, Config{Clock: clk.now, ProbeTimeout: 10 * time.Second})
	e := g.Links()
	if _, _, ok := e.Estimate("p", "d"); ok {
		t.Fatal("a never-seen link has an estimate")
	}
	if !e.NeedsProbe("p", "d") {
		t.Fatal("a never-seen link does not need a probe")
	}
	if !e.MarkProbing("p", "d") {
		t.Fatal("first MarkProbing lost")
	}
	if e.MarkProbing("p", "d") || e.NeedsProbe("p", "d") {
		t.Error("a second caller may probe while the first runs")
	}
	clk.advance(11 * time.Second)
	if !e.NeedsProbe("p", "d") {
		t.Error("a probe past its timeout still blocks a new one")
	}
	if !e.MarkProbing("p", "d") {
		t.Fatal("MarkProbing after timeout lost")
	}
	e.ProbeFailed("p", "d")
	if !e.NeedsProbe("p", "d") {
		t.Error("a failed probe leaves the link not needing one")
	}
	e.MarkProbing("p", "d")
	e.ObserveProbe("p", "d", 1e9, 2*time.Millisecond)
	bps, rtt, ok := e.Estimate("p", "d")
	if !ok || bps != 1e9 || rtt != 2*time.Millisecond {
		t.Errorf("estimate = %v, %v, %v; want 1e9, 2ms, true", bps, rtt, ok)
	}
	if e.NeedsProbe("p", "d") {
		t.Error("a measured link needs a probe")
	}
	// The reverse direction is a different link.
	if _, _, ok := e.Estimate("d", "p"); ok {
		t.Error("d→p shares p→d's estimate")
	}
}

func TestLinkEstimatorEWMA(t *testing.T) {
	// Transfers one after another: each ends a second after the last.
	clk := &fakeClock{t: time.Unix(1000, 0)}
	g := newGate(t, Config{EWMAAlpha: 0.25, Clock: clk.now})
	e := g.Links()
	// A real transfer seeds an unprobed link directly.
	e.Observe("p", "d", 100e6, time.Second)
	clk.advance(time.Second)
	if bps, _, _ := e.Estimate("p", "d"); bps != 100e6 {
		t.Fatalf("first sample: %v, want 1e8", bps)
	}
	e.Observe("p", "d", 200e6, time.Second) // 0.25·200 + 0.75·100 = 125
	if bps, _, _ := e.Estimate("p", "d"); bps != 125e6 {
		t.Errorf("after second sample: %v, want 1.25e8", bps)
	}
	e.Observe("p", "d", 0, time.Second)
	e.Observe("p", "d", 1, 0)
	if bps, _, _ := e.Estimate("p", "d"); bps != 125e6 {
		t.Errorf("empty samples moved the estimate to %v", bps)
	}
	// The estimate converges on a changed link.
	for range 30 {
		clk.advance(time.Second)
		e.Observe("p", "d", 1e9, time.Second)
	}
	if bps, _, _ := e.Estimate("p", "d"); bps < 0.99e9 {
		t.Errorf("after 30 samples at 1 GB/s: %v", bps)
	}
	snap := e.Snapshot()
	if len(snap) != 1 || snap[0].Samples != 32 || !snap[0].Measured {
		t.Errorf("snapshot = %+v", snap)
	}
}

func TestLinkEstimatorConcurrent(t *testing.T) {
	g := newGate(t, Config{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 1000 {
				g.Links().Observe("p", "d", int64(1e6*(i+1)), time.Millisecond)
				g.Links().Estimate("p", "d")
				g.Decide(Input{PromptTokens: j, PrefillD: linearPrefill(time.Microsecond), PrefillP: linearPrefill(time.Microsecond), Link: Link{"p", "d"}})
			}
		}()
	}
	wg.Wait()
	// The transfers overlap in time, so each counts up to 2·maxRecent
	// times its own rate.
	bps, _, ok := g.Links().Estimate("p", "d")
	if !ok || bps < 1e9 || bps > 2*maxRecent*4e9 {
		t.Errorf("estimate %v after samples in [1e9, 4e9] that overlapped", bps)
	}
}

// TestProbeReplacesEstimate: a probe measures the link as it is now; real
// transfers after it are averaged in.
func TestProbeReplacesEstimate(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	g := newGate(t, Config{EWMAAlpha: 0.5, Clock: clk.now})
	g.Links().Observe("p", "d", 10e6, time.Second) // before the probes: no longer counts
	clk.advance(time.Second)
	e := g.Links()
	e.ObserveProbe("p", "d", 50e6, 0) // e.g. measured while the link was shared
	e.ObserveProbe("p", "d", 120e6, 0)
	if bps, _, _ := e.Estimate("p", "d"); bps != 120e6 {
		t.Errorf("after a second probe: %v, want 1.2e8 (not a blend)", bps)
	}
	e.Observe("p", "d", 80e6, time.Second) // 0.5·80 + 0.5·120
	if bps, _, _ := e.Estimate("p", "d"); bps != 100e6 {
		t.Errorf("after a transfer: %v, want 1e8", bps)
	}
}

func TestForgetDropsLinks(t *testing.T) {
	g := newGate(t, Config{})
	e := g.Links()
	e.ObserveProbe("p", "d1", 1e8, time.Millisecond)
	e.ObserveProbe("p", "d2", 1e8, time.Millisecond)
	e.ObserveProbe("q", "d1", 1e8, time.Millisecond)
	e.Forget("d1")
	if _, _, ok := e.Estimate("p", "d1"); ok {
		t.Error("p→d1 still known after Forget(d1)")
	}
	if _, _, ok := e.Estimate("p", "d2"); !ok {
		t.Error("p→d2 lost by Forget(d1)")
	}
	if n := len(e.Snapshot()); n != 1 {
		t.Errorf("%d links left, want 1", n)
	}
}

// TestLinkEstimatorCorrectsSharing checks that transfers sharing a
// prefill worker's link (to any decode worker) are counted at the link's
// rate, not at their shares of it. The link moves 100 MB/s, shared fairly,
// and every case's transfers are sized as such a link would move them.
func TestLinkEstimatorCorrectsSharing(t *testing.T) {
	const rate = 100e6
	type xfer struct {
		to         string
		start, end float64 // seconds
		mb         float64
	}
	at := func(s float64) time.Time { return time.Unix(1000, 0).Add(time.Duration(s * float64(time.Second))) }
	for _, tc := range []struct {
		name  string
		xfers []xfer // in the order they end
	}{
		{"side by side", []xfer{{"d1", 0, 2, 100}, {"d2", 0, 2, 100}}},
		// The 50 MB transfer ends while the 250 MB one, which it shared
		// the link with, is still in flight and unknown.
		{"one inside another", []xfer{{"d1", 1, 2, 50}, {"d1", 0, 3, 250}}},
		// 1, then 2, then 3, then 2, then 1 in flight.
		{"staggered", []xfer{{"d2", 1, 6, 200}, {"d1", 0, 8, 400}, {"d1", 3, 9, 300}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fakeClock{t: at(0)}
			g := newGate(t, Config{Clock: clk.now})
			e := g.Links()
			e.ObserveProbe("p", "d1", rate, time.Millisecond)
			e.ObserveProbe("p", "d2", rate, time.Millisecond)
			for _, x := range tc.xfers {
				clk.t = at(x.end)
				e.Observe("p", x.to, int64(x.mb*1e6), time.Duration((x.end-x.start)*float64(time.Second)))
			}
			for _, d := range []string{"d1", "d2"} {
				if bps, _, _ := e.Estimate("p", d); math.Abs(bps-rate) > 0.01*rate {
					t.Errorf("p→%s: %.4g B/s after the transfers, want the link's %.4g", d, bps, rate)
				}
			}
		})
	}
}

// TestLinkEstimatorSlowerLink checks the correction does not hide a link
// that got slower: transfers one after another at half the probed rate
// bring the estimate down to it.
func TestLinkEstimatorSlowerLink(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	g := newGate(t, Config{Clock: clk.now})
	e := g.Links()
	e.ObserveProbe("p", "d", 100e6, time.Millisecond)
	for range 40 {
		clk.advance(time.Second)
		e.Observe("p", "d", 50e6, time.Second)
	}
	if bps, _, _ := e.Estimate("p", "d"); math.Abs(bps-50e6) > 0.01*50e6 {
		t.Errorf("%.4g B/s after 40 transfers at 50 MB/s, want 5e7", bps)
	}
}

// TestLinkEstimatorLeavesOutRTT checks a transfer's rate is learnt from the
// time its bytes took, since the gate adds the link's RTT to each transfer
// on its own: 5 MB in 60 ms on a 100 MB/s link with a 10 ms RTT.
func TestLinkEstimatorLeavesOutRTT(t *testing.T) {
	g := newGate(t, Config{})
	e := g.Links()
	e.ObserveProbe("p", "d", 100e6, 10*time.Millisecond)
	e.Observe("p", "d", 5e6, 60*time.Millisecond)
	if bps, _, _ := e.Estimate("p", "d"); math.Abs(bps-100e6) > 1e3 {
		t.Errorf("%.6g B/s, want 1e8", bps)
	}
}
