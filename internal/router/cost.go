package router

import (
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/perfmodel"
)

// timed reports whether p can price prefill and decode time: a bridged
// engine started without --gpu registers a profile without rates.
func timed(p *bus.Profile) bool {
	return p != nil && p.PeakFLOPS > 0 && p.MFU > 0 && p.MemBandwidth > 0 && p.MBU > 0
}

// defaultChunk is the prefill chunk a profile that states none is priced
// in: vLLM's default max_num_batched_tokens.
const defaultChunk = 8192

// estimate is the kv policy's prediction for one candidate, in wall
// seconds (simulated seconds over the profile's Speedup).
type estimate struct {
	ttft   float64 // queue wait (or lower-tier load, if longer) plus own prefill
	decode float64 // output tokens × one decode step of the worker's batch
}

// pricer computes estimates for one request. It remembers the last profile
// it priced a cold candidate on, so a pool of identical workers costs one
// prefill prediction, not one per candidate. The zero value is ready; not
// safe for concurrent use (each Pick has its own, in its scratch).
type pricer struct {
	last      bus.Profile
	have      bool
	prompt    int     // the prompt these were computed for
	perToken  float64 // last's prefill seconds per queued token
	coldOwn   float64 // last's prefill seconds for the whole prompt, nothing cached
	chunkSize int
}

// reset forgets the memo when the prompt changes.
func (pr *pricer) reset(prompt int) {
	if pr.prompt != prompt {
		pr.have, pr.prompt = false, prompt
	}
}

// profile loads p's per-token and cold prefill times into the memo.
func (pr *pricer) profile(p *bus.Profile) {
	if pr.have && pr.last == *p {
		return
	}
	pr.last, pr.have = *p, true
	c := p.MaxBatchTokens
	if c <= 0 {
		c = defaultChunk
	}
	pr.chunkSize = c
	pr.perToken = perfmodel.PrefillTime(p, c, 0).Seconds() / float64(c)
	pr.coldOwn = perfmodel.PrefillTime(p, pr.prompt, 0).Seconds()
}

// estimate predicts what serving a prompt of prompt tokens (blocks of bs;
// out output tokens, 0 when unknown) costs on w, whose index overlap is tc
// and whose tracked load is w.Load; see the package doc for the formula.
// blind counts lower-tier blocks as misses.
func (pr *pricer) estimate(w *Worker, tc kvindex.TierCounts, prompt, out, bs int, blind bool) estimate {
	p := w.Profile
	g := int(tc[kvindex.TierGPU])
	lower := int(tc[kvindex.TierCPU]) + int(tc[kvindex.TierDisk])
	n := max(prompt, (g+lower)*bs)
	pr.reset(n)
	pr.profile(p)

	hit := g
	var load time.Duration
	if lower > 0 && !blind {
		// The engine loads the lower-tier blocks only when that beats
		// recomputing them (sim.Core.worthLoading): predict the same.
		recompute, l := perfmodel.LowerTierSaving(p, n, g*bs, int(tc[kvindex.TierCPU])*bs, int(tc[kvindex.TierDisk])*bs)
		if l < recompute {
			hit, load = g+lower, l
		}
	}
	if hit*bs >= n {
		hit = (n - 1) / bs // the engine computes the last token for its logits
	}
	own := pr.coldOwn
	if hit > 0 {
		own = perfmodel.PrefillTime(p, n-hit*bs, hit*bs).Seconds()
	}
	// The engine admits a prompt, and starts its load, once the prefills
	// queued ahead leave it room in a step's token budget; it computes once
	// the load lands. Loads of the prompts ahead started at their own
	// admissions, in the same order on the same host link, and landed
	// before those prompts computed: within the wait.
	wait := float64(w.Load.QueuedPrefillBlocks*bs) * pr.perToken
	start := wait + load.Seconds()

	// One decode step of the worker's batch with this request in it: every
	// sequence's token, every KV block read once.
	var step perfmodel.Work
	step.Tokens = w.Load.InFlight + 1
	step.KVReadTokens = w.Load.ActiveDecodeBlocks*bs + n
	step.AttnPairs = float64(step.KVReadTokens)
	decode := float64(max(out, 1)) * perfmodel.StepSeconds(p, step)

	s := 1.0
	if p.Speedup > 0 {
		s = p.Speedup
	}
	return estimate{ttft: (start + own) / s, decode: decode / s}
}
