package router

import (
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"testing"
)

// fixedOv is an Overlapper over fixed values.
type fixedOv []int

func (f fixedOv) Overlap(i int) (int, bool) { return f[i], false }

func (f fixedOv) Priced(i int) float64 { return float64(f[i]) }

func (f fixedOv) Tiers(i int) kvindex.TierCounts { return kvindex.TierCounts{int32(f[i]), 0, 0} }

func (f fixedOv) Estimate(int) (float64, float64, bool) { return 0, 0, false }

func ws(loads ...Load) []Worker {
	out := make([]Worker, len(loads))
	for i, l := range loads {
		out[i] = Worker{ID: string(rune('a' + i)), EventsHealthy: true, Load: l}
	}
	return out
}

func TestKVPick(t *testing.T) {
	req := &Request{Hashes: make([]uint64, 20)}
	idle := Load{}
	tests := []struct {
		name    string
		workers []Worker
		ov      fixedOv
		want    string
		reason  string
		cost    float64
	}{
		{"prefers overlap", ws(idle, idle, idle), fixedOv{0, 12, 5}, "b", ReasonOverlap, 8},
		{"longest overlap wins", ws(idle, idle), fixedOv{19, 20}, "b", ReasonOverlap, 0},
		{"load beats overlap when it exceeds the saved prefill",
			ws(Load{ActiveDecodeBlocks: 30}, idle), fixedOv{20, 0}, "b", ReasonNoOverlap, 20},
		{"overlap beats load when the saved prefill is larger",
			ws(Load{ActiveDecodeBlocks: 10}, idle), fixedOv{20, 0}, "a", ReasonOverlap, 10},
		{"queued prefill counts", ws(Load{QueuedPrefillBlocks: 25}, idle), fixedOv{20, 0}, "b", ReasonNoOverlap, 20},
		{"cost tie goes to the least loaded",
			ws(Load{ActiveDecodeBlocks: 6}, Load{ActiveDecodeBlocks: 4}), fixedOv{11, 9}, "b", ReasonOverlap, 15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &KV{}
			for rep := 0; rep < len(tt.workers); rep++ { // every rotation offset
				d, err := p.Pick(req, tt.workers, tt.ov)
				if err != nil {
					t.Fatal(err)
				}
				if d.Worker != tt.want || d.Reason != tt.reason || d.Cost != tt.cost || d.Policy != PolicyKV {
					t.Errorf("pick = %+v, want worker %s reason %s cost %v", d, tt.want, tt.reason, tt.cost)
				}
			}
		})
	}
}

func TestKVAlpha(t *testing.T) {
	// With α = 3 each uncached block is worth three decode blocks, so 20
	// blocks of overlap outweigh 50 decode blocks.
	req := &Request{Hashes: make([]uint64, 20)}
	workers := ws(Load{ActiveDecodeBlocks: 50}, Load{})
	d, _ := (&KV{Alpha: 3}).Pick(req, workers, fixedOv{20, 0})
	if d.Worker != "a" {
		t.Errorf("α=3 picked %s, want a", d.Worker)
	}
	d, _ = (&KV{Alpha: 1}).Pick(req, workers, fixedOv{20, 0})
	if d.Worker != "b" {
		t.Errorf("α=1 picked %s, want b", d.Worker)
	}
}

// TestFullTiesRotate: round-robin, and the tie-breaking of kv and
// least-loaded for prompts too short to fill a block, rotate evenly.
func TestFullTiesRotate(t *testing.T) {
	workers := ws(Load{}, Load{}, Load{}, Load{})
	for _, p := range []Policy{&KV{}, &LeastLoaded{}, &RoundRobin{}} {
		t.Run(p.Name(), func(t *testing.T) {
			got := map[string]int{}
			for i := 0; i < 400; i++ {
				d, _ := p.Pick(&Request{PromptTokens: 5}, workers, fixedOv{0, 0, 0, 0})
				got[d.Worker]++
			}
			for _, w := range workers {
				if got[w.ID] != 100 {
					t.Errorf("%s picked %d times of 400, want 100 (%v)", w.ID, got[w.ID], got)
				}
			}
		})
	}
}

// TestFullTiesRank: kv and least-loaded break full ties by tieRank, a hash
// of the prompt's chain hash and the worker: the same prompt goes to the
// same worker whatever came before, whichever replica picks (rotation
// start) and in whatever order the candidates come, while distinct prompts
// spread as evenly as random choice would.
func TestFullTiesRank(t *testing.T) {
	workers := ws(Load{}, Load{}, Load{}, Load{})
	reversed := []Worker{workers[3], workers[2], workers[1], workers[0]}
	for _, newPolicy := range []func(start uint64) Policy{
		func(start uint64) Policy { p := &KV{}; p.rot.start = start; return p },
		func(start uint64) Policy { p := &LeastLoaded{}; p.rot.start = start; return p },
	} {
		t.Run(newPolicy(0).Name(), func(t *testing.T) {
			a, b := newPolicy(0), newPolicy(12345)
			got := map[string]int{}
			const n = 4000
			for i := range n {
				req := &Request{Hashes: []uint64{7, kvindex.Mix(uint64(i))}}
				d, _ := a.Pick(req, workers, fixedOv{0, 0, 0, 0})
				got[d.Worker]++
				for k := range 3 { // later picks, another replica, another order
					d2, _ := b.Pick(req, workers, fixedOv{0, 0, 0, 0})
					d3, _ := a.Pick(req, reversed, fixedOv{0, 0, 0, 0})
					if d2.Worker != d.Worker || d3.Worker != d.Worker {
						t.Fatalf("prompt %d, repeat %d: picked %s, then %s (other replica) and %s (reversed candidates)",
							i, k, d.Worker, d2.Worker, d3.Worker)
					}
				}
			}
			// Uniform choice gives 1,000 ± 27 (one standard deviation).
			for _, w := range workers {
				if got[w.ID] < 900 || got[w.ID] > 1100 {
					t.Errorf("%s won %d of %d ties, want about %d (%v)", w.ID, got[w.ID], n, n/4, got)
				}
			}
		})
	}
}

// TestTieRankAfterLoadAndCache: the rank only decides among candidates
// equal on cost, load and cached blocks.
func TestTieRankAfterLoadAndCache(t *testing.T) {
	req := &Request{Hashes: []uint64{42, 43}}
	idle := ws(Load{}, Load{})
	d, _ := (&KV{}).Pick(req, idle, fixedOv{0, 0})
	other := "a"
	if d.Worker == "a" {
		other = "b"
	}
	i := int(other[0] - 'a')
	for _, l := range []Load{{CachedBlocks: 1}, {ActiveDecodeBlocks: 1}} {
		w := ws(l, l)
		w[i].Load = Load{}
		if d, _ := (&KV{}).Pick(req, w, fixedOv{0, 0}); d.Worker != other {
			t.Errorf("kv with %+v on the tie-rank winner picked %s, want %s", l, d.Worker, other)
		}
	}
}

func TestRoundRobinOrder(t *testing.T) {
	p := &RoundRobin{}
	workers := ws(Load{}, Load{ActiveDecodeBlocks: 99}, Load{})
	var got string
	for i := 0; i < 6; i++ {
		d, _ := p.Pick(&Request{}, workers, fixedOv{0, 0, 0})
		got += d.Worker
	}
	if got != "abcabc" {
		t.Errorf("rotation = %s, want abcabc", got)
	}
}

func TestLeastLoaded(t *testing.T) {
	p := &LeastLoaded{}
	workers := ws(Load{QueuedPrefillBlocks: 3}, Load{ActiveDecodeBlocks: 1}, Load{ActiveDecodeBlocks: 2, QueuedPrefillBlocks: 2})
	for i := 0; i < 3; i++ {
		d, _ := p.Pick(&Request{}, workers, fixedOv{9, 0, 0})
		if d.Worker != "b" {
			t.Errorf("pick %d = %s, want b", i, d.Worker)
		}
	}
}

func TestRandomSeeded(t *testing.T) {
	workers := ws(Load{}, Load{}, Load{}, Load{}, Load{})
	seq := func(seed uint64) string {
		p := NewRandom(seed)
		s := ""
		for i := 0; i < 30; i++ {
			d, _ := p.Pick(&Request{}, workers, fixedOv{0, 0, 0, 0, 0})
			s += d.Worker
		}
		return s
	}
	if a, b := seq(1), seq(1); a != b {
		t.Errorf("same seed gave %s and %s", a, b)
	}
	if a, b := seq(1), seq(2); a == b {
		t.Errorf("different seeds gave the same sequence %s", a)
	}
}

func TestNoWorkers(t *testing.T) {
	for _, p := range []Policy{&KV{}, &LeastLoaded{}, &RoundRobin{}, NewRandom(1)} {
		if _, err := p.Pick(&Request{}, nil, fixedOv{}); err != ErrNoWorkers {
			t.Errorf("%s: err = %v, want ErrNoWorkers", p.Name(), err)
		}
	}
}

// TestRotationPerCandidateSet: a frontend picks a decode worker and then a
// prefill worker for each request. Picks from the prefill pool must not
// advance the decode pool's rotation (with one shared counter, two decode
// workers and one prefill worker, every request landed on the same decode
// worker). kv and least-loaded rotate only prompts without a full block.
func TestRotationPerCandidateSet(t *testing.T) {
	decode := []Worker{{ID: "decode-1", EventsHealthy: true}, {ID: "decode-2", EventsHealthy: true}}
	prefill := []Worker{{ID: "prefill-1", EventsHealthy: true}}
	for _, p := range []Policy{&RoundRobin{}, &KV{}, &LeastLoaded{}} {
		t.Run(p.Name(), func(t *testing.T) {
			req := &Request{PromptTokens: 5}
			got := map[string]int{}
			var seq string
			for i := 0; i < 6; i++ {
				d, err := p.Pick(req, decode, fixedOv{0, 0})
				if err != nil {
					t.Fatal(err)
				}
				got[d.Worker]++
				seq += d.Worker[len(d.Worker)-1:]
				if _, err := p.Pick(req, prefill, fixedOv{0}); err != nil {
					t.Fatal(err)
				}
			}
			if got["decode-1"] != 3 || got["decode-2"] != 3 {
				t.Errorf("decode picks %v (sequence %s), want 3 each", got, seq)
			}
			if seq != "121212" && seq != "212121" {
				t.Errorf("decode sequence %s does not alternate", seq)
			}
		})
	}
}

func TestSetKeyIgnoresOrder(t *testing.T) {
	ab := []Worker{{ID: "a"}, {ID: "b"}}
	ba := []Worker{{ID: "b"}, {ID: "a"}}
	if setKey(ab) != setKey(ba) {
		t.Errorf("setKey depends on order")
	}
	for _, other := range [][]Worker{{{ID: "a"}}, {{ID: "b"}}, {{ID: "a"}, {ID: "c"}}, {{ID: "ab"}}} {
		if setKey(ab) == setKey(other) {
			t.Errorf("setKey(%v) == setKey(%v)", ab, other)
		}
	}
}

func TestRotationBounded(t *testing.T) {
	var r rotation
	for i := 0; i < 3*maxRotations; i++ {
		r.next([]Worker{{ID: string(rune('A'+i%26)) + string(rune(i))}})
	}
	r.mu.RLock()
	n := len(r.m)
	r.mu.RUnlock()
	if n > maxRotations {
		t.Errorf("rotation holds %d counters, want at most %d", n, maxRotations)
	}
}
