package gate

import (
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
	g := newGate(t, Config{EWMAAlpha: 0.25})
	e := g.Links()
	// A real transfer seeds an unprobed link directly.
	e.Observe("p", "d", 100e6, time.Second)
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
	bps, _, ok := g.Links().Estimate("p", "d")
	if !ok || bps < 1e9 || bps > 4e9 {
		t.Errorf("estimate %v after samples in [1e9, 4e9]", bps)
	}
}

// TestProbeReplacesEstimate: a probe measures the link as it is now; real
// transfers after it are averaged in.
func TestProbeReplacesEstimate(t *testing.T) {
	g := newGate(t, Config{EWMAAlpha: 0.5})
	e := g.Links()
	e.ObserveProbe("p", "d", 50e6, time.Millisecond) // e.g. measured while the link was shared
	e.ObserveProbe("p", "d", 120e6, time.Millisecond)
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
