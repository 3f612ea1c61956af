package bench

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// Item is one planned request.
type Item struct {
	Index        int
	At           time.Duration // planned send time from the run's start; 0 = as soon as a slot frees
	Group        string        // prefix ("p2"), prompt size ("1500") or "" for traces
	SharedTokens int           // leading tokens deliberately shared with other requests
	InputTokens  int
	MaxTokens    int

	prompt  []uint32 // materialised prompt (routing, disagg)
	hashIDs []int64  // Mooncake blocks, built when sent
	unique  int      // id of a unique prompt built when sent (Azure), -1 if unused
}

// AppendPrompt appends the item's prompt tokens to dst.
func (it *Item) AppendPrompt(b *PromptBuilder, dst []uint32) []uint32 {
	switch {
	case it.prompt != nil:
		return append(dst, it.prompt...)
	case it.hashIDs != nil:
		return b.AppendMooncake(dst, it.hashIDs, it.InputTokens)
	default:
		return b.AppendUnique(dst, it.unique, it.InputTokens)
	}
}

// Plan is the requests of one scenario: Warmup runs first, one at a time,
// and is excluded from aggregates; Items are measured.
type Plan struct {
	Warmup      []Item
	Items       []Item
	Concurrency int  // in-flight limit for Items; 0 = unlimited
	Open        bool // arrival times matter (trace or --rate)
}

// BuildPlan turns cfg into the requests to send. It is deterministic in
// cfg.Seed.
func BuildPlan(cfg Config) (Plan, error) {
	b := NewPromptBuilder(cfg.Seed)
	var p Plan
	switch cfg.Scenario {
	case ScenarioRouting, ScenarioSelftest:
		prefixes, err := buildPrefixes(cfg, b)
		if err != nil {
			return Plan{}, err
		}
		r := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x726f75746e67)) // "routng"
		mk := func(i, k int) Item {
			pr := append(make([]uint32, 0, len(prefixes[k])+cfg.SuffixTokens), prefixes[k]...)
			pr = b.AppendSuffix(pr, i, cfg.SuffixTokens)
			return Item{Index: i, Group: "p" + strconv.Itoa(k), SharedTokens: len(prefixes[k]),
				InputTokens: len(pr), MaxTokens: cfg.MaxTokens, prompt: pr, unique: -1}
		}
		for w := range cfg.Warmup {
			// Suffix ids after the measured ones keep every suffix unique.
			p.Warmup = append(p.Warmup, mk(cfg.Requests+w, w%cfg.Prefixes))
		}
		for i := range cfg.Requests {
			p.Items = append(p.Items, mk(i, r.IntN(cfg.Prefixes)))
		}
		p.Concurrency = cfg.Concurrency
	case ScenarioDisagg:
		i := 0
		for _, n := range cfg.PromptTokens {
			for range cfg.Repeats {
				pr := b.AppendUnique(make([]uint32, 0, n), i, n)
				p.Items = append(p.Items, Item{Index: i, Group: strconv.Itoa(n), InputTokens: n,
					MaxTokens: cfg.MaxTokens, prompt: pr, unique: -1})
				i++
			}
		}
		p.Concurrency = 1 // one at a time: each TTFT is the gate's decision alone
	case ScenarioTrace:
		reqs, err := ReadTraceSlice(cfg.TracePath, cfg.TraceFormat, cfg.Skip, cfg.MaxRequests)
		if err != nil {
			return Plan{}, err
		}
		p.Items = TraceItems(reqs, cfg.TimeScale)
		if cfg.LongShare > 0 {
			ApplyLongShare(p.Items, cfg.LongShare, cfg.LongTokens, cfg.Seed)
		}
		p.Concurrency = cfg.Concurrency
		p.Open = true
		return p, nil
	default:
		return Plan{}, fmt.Errorf("bench: no plan for scenario %q", cfg.Scenario)
	}
	if cfg.Rate > 0 {
		r := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x72617465)) // "rate"
		var at float64
		for i := range p.Items {
			p.Items[i].At = time.Duration(at * float64(time.Second))
			at += r.ExpFloat64() / cfg.Rate
		}
		p.Open = true
	}
	return p, nil
}

// TraceItems turns trace requests into planned items: arrivals scaled by
// timeScale, Mooncake prompts built from their hash ids, prompts without
// prefix information unique per request.
func TraceItems(reqs []TraceRequest, timeScale float64) []Item {
	items := make([]Item, len(reqs))
	for i, tr := range reqs {
		items[i] = Item{Index: i, At: time.Duration(float64(tr.At) * timeScale), InputTokens: tr.InputTokens,
			// The trace's output length is exact with ignore_eos; an engine
			// needs at least one token to answer at all.
			MaxTokens: max(tr.OutputTokens, 1), hashIDs: tr.HashIDs, unique: i}
	}
	return items
}

// ApplyLongShare gives a share of items, chosen deterministically from
// seed, tokens input tokens and a unique prompt (their trace prefix blocks
// described the old length), grouped as "long".
func ApplyLongShare(items []Item, share float64, tokens int, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x6c6f6e67)) // "long"
	for i := range items {
		if r.Float64() < share {
			items[i].InputTokens, items[i].hashIDs, items[i].Group = tokens, nil, "long"
		}
	}
}

func buildPrefixes(cfg Config, b *PromptBuilder) ([][]uint32, error) {
	out := make([][]uint32, cfg.Prefixes)
	var tok *tokenizer.Tokenizer
	if cfg.PrefixWords > 0 {
		var err error
		if tok, err = tokenizer.New(); err != nil {
			return nil, fmt.Errorf("bench: --prefix-words needs the tokenizer: %w", err)
		}
	}
	for k := range out {
		if tok != nil {
			out[k] = AppendWordPrefix(nil, k, tok.Encode(b.WordText(k, cfg.PrefixWords)))
		} else {
			out[k] = b.AppendPrefix(nil, k, cfg.PrefixTokens)
		}
	}
	return out, nil
}
