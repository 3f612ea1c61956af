package simulate

import (
	"testing"

	"github.com/switchyard-llm/switchyard/internal/gate"
	"github.com/switchyard-llm/switchyard/internal/linkemu"
)

// The decode leg of a remote prefill counts the blocks it received as
// cached, as live engines do. The report keeps them apart: with every
// prefill remote on this slice, whose requests reuse little (its hit ratio
// aggregated is 0.018), the hit ratio read 0.998 when they were counted.
func TestPulledKVIsTransferredNotCached(t *testing.T) {
	c := smallConfig(t, 150)
	c.Workers, c.PrefillWorkers, c.LinkRate = 2, 1, linkemu.Rate(1.25e9)
	c.Disagg = gate.ModeAlways
	rep := run(t, c)
	a := rep.Runs[0].Aggregate
	if a.OK != 150 || a.PrefillRemote != 150 {
		t.Fatalf("ok %d, remote %d: want 150 of each", a.OK, a.PrefillRemote)
	}
	if a.HitRatio > 0.2 {
		t.Errorf("hit ratio %.3f: pulled KV is counted as cached", a.HitRatio)
	}
	// Nothing is lost: what the decode workers held and what they received
	// cover nearly every prompt (only partial last blocks are recomputed).
	if got := float64(a.CachedTokens+a.TransferredTokens) / float64(a.PromptTokens); got < 0.9 {
		t.Errorf("cached %d + transferred %d = %.3f of %d prompt tokens, want >= 0.9", a.CachedTokens, a.TransferredTokens, got, a.PromptTokens)
	}
	for _, r := range rep.Runs[0].Records {
		if r.CachedTokens+r.TransferredTokens > r.PromptTokens || r.TransferredTokens%c.Engine.BlockSize != 0 {
			t.Errorf("request %d: cached %d + transferred %d of %d prompt tokens", r.Index, r.CachedTokens, r.TransferredTokens, r.PromptTokens)
		}
	}

	c.Disagg = gate.ModeNever
	if n := run(t, c).Runs[0].Aggregate; n.TransferredTokens != 0 || n.PrefillRemote != 0 {
		t.Errorf("disagg never: %d transferred tokens, %d remote prefills; want none", n.TransferredTokens, n.PrefillRemote)
	}
}
