package router

import (
	"testing"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/perfmodel"
)

func h100Profile(t testing.TB) bus.Profile {
	t.Helper()
	m, err := perfmodel.LookupModel("llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	g, err := perfmodel.LookupGPU("h100")
	if err != nil {
		t.Fatal(err)
	}
	p := perfmodel.NewProfile(m, g, 1)
	p.MaxBatchTokens = 8192
	return p
}

// TestTierPricedPick: worker a holds a 1,024-token prompt in host memory,
// b holds nothing; both idle. Loading 128 MiB over PCIe Gen5 (~2.7 ms)
// beats recomputing ~1,000 tokens of llama-3.1-8b on an H100 (~30 ms), so
// a wins; over a 1 MB/s link loading loses and the hit is worth nothing,
// and so it is for a tier-blind router.
func TestTierPricedPick(t *testing.T) {
	const bs = 16
	fast := h100Profile(t)
	slow := fast
	slow.HostLinkBandwidth = 1e6
	tests := []struct {
		name      string
		profile   bus.Profile
		blind     bool
		want      string
		wantPrice func(float64) bool
	}{
		{"loading beats recomputing", fast, false, "a", func(p float64) bool { return p > 50 && p < 64 }},
		{"recomputing beats loading", slow, false, "b", func(p float64) bool { return p == 0 }},
		{"tier-blind", fast, true, "b", func(p float64) bool { return p == 0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			idx := kvindex.New(kvindex.Config{})
			r, _ := newTestRouter(t, Config{Index: idx, TierBlind: tc.blind})
			h := hashes(9, 64)
			idx.StoreTier("a", kvindex.TierCPU, h)
			p := tc.profile
			cands := []Worker{{ID: "a", EventsHealthy: true, Profile: &p}, {ID: "b", EventsHealthy: true, Profile: &p}}
			d, err := r.Pick(&Request{Hashes: h, PromptTokens: 64 * bs, BlockSize: bs}, cands)
			if err != nil {
				t.Fatal(err)
			}
			if d.Worker != tc.want {
				t.Errorf("picked %s (%+v), want %s", d.Worker, d, tc.want)
			}
			// The a-side price, whichever won.
			priced := r.priced(&cands[0], kvindex.TierCounts{0, 64, 0}, 64*bs, bs)
			if !tc.wantPrice(priced) {
				t.Errorf("a's 64 CPU blocks priced at %.2f blocks", priced)
			}
			if d.Worker == "a" && (d.Tiers != kvindex.TierCounts{0, 64, 0} || d.OverlapBlocks != 64) {
				t.Errorf("decision tiers %v overlap %d, want [0 64 0] and 64", d.Tiers, d.OverlapBlocks)
			}
		})
	}
}

// TestTierPricedAgainstGPU: a GPU holder of the same prefix beats a CPU
// holder, which beats a cold worker.
func TestTierPricedAgainstGPU(t *testing.T) {
	idx := kvindex.New(kvindex.Config{})
	r, _ := newTestRouter(t, Config{Index: idx})
	h := hashes(10, 64)
	idx.StoreTier("cpu", kvindex.TierCPU, h)
	idx.StoreTier("gpu", kvindex.TierGPU, h)
	p := h100Profile(t)
	req := &Request{Hashes: h, PromptTokens: 64 * 16, BlockSize: 16}
	cands := []Worker{{ID: "cold", EventsHealthy: true, Profile: &p}, {ID: "cpu", EventsHealthy: true, Profile: &p}, {ID: "gpu", EventsHealthy: true, Profile: &p}}
	if d, _ := r.Pick(req, cands); d.Worker != "gpu" || d.Priced != 64 {
		t.Errorf("picked %s priced %.1f, want gpu at 64", d.Worker, d.Priced)
	}
	if d, _ := r.Pick(req, cands[:2]); d.Worker != "cpu" {
		t.Errorf("picked %s, want cpu over cold", d.Worker)
	}
}
