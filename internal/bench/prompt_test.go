package bench

import (
	"slices"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

func commonPrefix(a, b []kvindex.BlockHash) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestMooncakeBlocks(t *testing.T) {
	b := NewPromptBuilder(7)
	tests := []struct {
		name       string
		a, b       []int64
		lenA, lenB int
		wantShared int // leading 512-token blocks that must be identical
	}{
		{"same ids", []int64{1, 2, 3}, []int64{1, 2, 3}, 1500, 1500, 3},
		{"shared two then differ", []int64{1, 2, 3}, []int64{1, 2, 4}, 1536, 1536, 2},
		{"differ at first", []int64{1, 2}, []int64{5, 2}, 1024, 1024, 0},
		{"partial last block is a prefix", []int64{1, 2}, []int64{1, 2}, 1024, 700, 1},
		{"ids a tokenSpan apart", []int64{0}, []int64{tokenSpan}, 512, 512, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pa := b.AppendMooncake(nil, tt.a, tt.lenA)
			pb := b.AppendMooncake(nil, tt.b, tt.lenB)
			if len(pa) != tt.lenA || len(pb) != tt.lenB {
				t.Fatalf("lengths = %d,%d, want %d,%d", len(pa), len(pb), tt.lenA, tt.lenB)
			}
			for i := range min(len(tt.a), len(tt.b)) {
				lo := i * MooncakeBlockTokens
				ea, eb := min(lo+MooncakeBlockTokens, len(pa)), min(lo+MooncakeBlockTokens, len(pb))
				blkA, blkB := pa[lo:ea], pb[lo:eb]
				n := min(len(blkA), len(blkB))
				same := slices.Equal(blkA[:n], blkB[:n])
				if tt.a[i] == tt.b[i] && !same {
					t.Errorf("block %d: equal ids %d give different tokens", i, tt.a[i])
				}
				if tt.a[i] != tt.b[i] && (blkA[0] == blkB[0] && blkA[1] == blkB[1]) {
					t.Errorf("block %d: ids %d and %d start with the same two tokens", i, tt.a[i], tt.b[i])
				}
			}
			// At the serving layer: equal leading ids ⇒ equal KV block hashes.
			ha := kvindex.HashChain(nil, "", pa, 16)
			hb := kvindex.HashChain(nil, "", pb, 16)
			want := min(tt.wantShared*MooncakeBlockTokens, tt.lenA, tt.lenB) / 16
			if tt.name == "partial last block is a prefix" {
				want = 700 / 16
			}
			if got := commonPrefix(ha, hb); got != want {
				t.Errorf("shared 16-token KV blocks = %d, want %d", got, want)
			}
		})
	}
}

func TestMooncakeTracePrefixReuse(t *testing.T) {
	reqs, err := ReadTrace(mooncakePath, FormatMooncake)
	if err != nil {
		t.Fatal(err)
	}
	b := NewPromptBuilder(1)
	// Every block id must map to one token sequence across the whole trace.
	firstTok := map[int64][2]uint32{}
	checked := 0
	for i := range reqs[:400] {
		p := b.AppendMooncake(nil, reqs[i].HashIDs, reqs[i].InputTokens)
		if len(p) != reqs[i].InputTokens {
			t.Fatalf("request %d: %d tokens, want %d", i, len(p), reqs[i].InputTokens)
		}
		for j, h := range reqs[i].HashIDs {
			if j*MooncakeBlockTokens+2 > len(p) {
				break // a last block of one token carries half an id
			}
			got := [2]uint32{p[j*MooncakeBlockTokens], p[j*MooncakeBlockTokens+1]}
			if prev, ok := firstTok[h]; ok {
				checked++
				if prev != got {
					t.Fatalf("hash id %d rebuilt differently", h)
				}
			}
			firstTok[h] = got
		}
	}
	if checked == 0 {
		t.Fatal("no hash id reused in the first 400 requests; the test checks nothing")
	}
}

func TestPrefixesAndSuffixes(t *testing.T) {
	b := NewPromptBuilder(3)
	const n = 64
	seen := map[uint32]int{}
	for k := range 50 {
		p := b.AppendPrefix(nil, k, n)
		if len(p) != n {
			t.Fatalf("prefix %d: %d tokens, want %d", k, len(p), n)
		}
		if o, dup := seen[p[0]]; dup {
			t.Errorf("prefixes %d and %d share their first token", o, k)
		}
		seen[p[0]] = k
		for _, tok := range p {
			if tok < tokenLo || tok >= tokenHi {
				t.Fatalf("token %d out of [%d,%d)", tok, tokenLo, tokenHi)
			}
		}
		if again := b.AppendPrefix(nil, k, n); !slices.Equal(p, again) {
			t.Errorf("prefix %d not deterministic", k)
		}
	}
	if slices.Equal(NewPromptBuilder(3).AppendSuffix(nil, 1, 8), NewPromptBuilder(4).AppendSuffix(nil, 1, 8)) {
		t.Error("different seeds gave the same suffix")
	}
}

func TestRoutingPlan(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Scenario, cfg.Requests, cfg.Prefixes, cfg.PrefixTokens, cfg.SuffixTokens = ScenarioRouting, 40, 3, 100, 5
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	p, err := BuildPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warmup) != 3 || len(p.Items) != 40 {
		t.Fatalf("warmup %d, items %d; want 3, 40", len(p.Warmup), len(p.Items))
	}
	b := NewPromptBuilder(cfg.Seed)
	suffixes := map[string]bool{}
	for _, it := range append(p.Warmup, p.Items...) {
		pr := it.AppendPrompt(b, nil)
		if len(pr) != 105 || it.SharedTokens != 100 {
			t.Fatalf("item %d: %d tokens, shared %d", it.Index, len(pr), it.SharedTokens)
		}
		k := int(pr[0] - tokenLo)
		if !slices.Equal(pr[:100], b.AppendPrefix(nil, k, 100)) || it.Group != "p"+string(rune('0'+k)) {
			t.Errorf("item %d: prompt does not start with its group's prefix", it.Index)
		}
		s := string(rune(pr[100])) + string(rune(pr[101])) + string(rune(pr[102]))
		if suffixes[s] {
			t.Errorf("item %d: suffix repeated", it.Index)
		}
		suffixes[s] = true
	}
	again, _ := BuildPlan(cfg)
	for i := range p.Items {
		if p.Items[i].Group != again.Items[i].Group {
			t.Fatal("plan is not deterministic in the seed")
		}
	}
}
