package bench

import (
	"fmt"
	"math"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/perfmodel"
)

// maxDecodeBatch is the engines' default max_num_seqs: the most sequences
// one decode step serves, before the KV cache bounds it further.
const maxDecodeBatch = 256

// Load is a trace's offered load against a deployment's capacity, from the
// timing profiles the workers registered (roofline: prefill at full
// max_num_batched_tokens chunks, decode at the largest batch the KV cache
// holds). It is a lower bound on the work: real batches are smaller, so a
// utilisation near or above 1 means queues that grow for the whole run.
type Load struct {
	Workers     int     // serving (aggregated or decode) workers
	DurationS   float64 // the replay's arrival span, wall seconds
	WorkS       float64 // engine seconds of work the replay asks for, in wall seconds (÷ speedup)
	Utilisation float64 // WorkS / (DurationS × Workers)
	Warning     string  // what to do when Utilisation > 1, else a one-line summary
}

// EstimateLoad compares items (a trace replay's plan, arrivals already
// multiplied by timeScale) with the serving workers of h. ok is false when the deployment reports no timing profile
// (a real engine), and the load cannot be estimated.
func EstimateLoad(items []Item, h Health, timeScale float64) (l Load, ok bool) {
	var p *bus.Profile
	kvTokens := 0
	for _, w := range h.Workers {
		if w.Role == "prefill" {
			continue
		}
		l.Workers++
		if w.Profile != nil && w.Profile.PeakFLOPS > 0 && (p == nil || w.KVBlocks*max(w.BlockSize, 1) < kvTokens) {
			p, kvTokens = w.Profile, w.KVBlocks*max(w.BlockSize, 1)
		}
	}
	if p == nil || l.Workers == 0 || len(items) < 2 {
		return l, false
	}
	chunk := p.MaxBatchTokens
	if chunk <= 0 {
		chunk = 8192 // the engines' default max_num_batched_tokens
	}
	var full perfmodel.Work
	full.Add(chunk, 0)
	prefillPerToken := perfmodel.StepSeconds(p, full) / float64(chunk)
	var in, out int
	for _, it := range items {
		in += it.InputTokens
		out += it.MaxTokens
	}
	// Decode: one step serves every running sequence; the KV cache bounds
	// how many run at once.
	ctx := (in + out/2) / len(items)
	batch := maxDecodeBatch
	if kvTokens > 0 && ctx > 0 {
		batch = max(1, min(batch, kvTokens/ctx))
	}
	var dec perfmodel.Work
	for range batch {
		dec.Add(1, ctx)
	}
	decodePerToken := perfmodel.StepSeconds(p, dec) / float64(batch)
	speedup := p.Speedup
	if speedup <= 0 {
		speedup = 1
	}
	l.WorkS = (float64(in)*prefillPerToken + float64(out)*decodePerToken) / speedup
	l.DurationS = (items[len(items)-1].At - items[0].At).Seconds()
	if l.DurationS <= 0 {
		return l, false
	}
	l.Utilisation = l.WorkS / (l.DurationS * float64(l.Workers))
	summary := fmt.Sprintf("offered load ≈ %.0f%% of the deployment's capacity at best (%.1f s of %s work per worker over a %.1f s replay on %d workers; estimated from their registered profiles)",
		100*l.Utilisation, l.WorkS/float64(l.Workers), p.GPU, l.DurationS, l.Workers)
	if l.Utilisation <= 1 {
		l.Warning = summary
		return l, true
	}
	need := l.Utilisation * 1.25 // headroom: batches are never perfect
	l.Warning = fmt.Sprintf("WARNING: %s. Requests will queue until they time out. "+
		"Slow the replay (--time-scale %.2g), add workers (up --workers %d), or run the simulated engines faster (up --speedup %.3g)",
		summary, timeScale*need, int(math.Ceil(float64(l.Workers)*need)), speedup*need)
	return l, true
}
