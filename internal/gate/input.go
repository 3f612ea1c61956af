package gate

import (
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/perfmodel"
)

// WorkerView is what the gate's input needs to know about one worker.
type WorkerView struct {
	ID              string // empty for "no prefill worker"
	Profile         bus.Profile
	BlockSize       int
	KVBytesPerToken int
	// Load is the worker's last load report; nil when unknown or when the
	// question is asked at empty queues.
	Load *WorkerLoad
}

// WorkerLoad is the part of a worker's load report the gate reads.
type WorkerLoad struct {
	QueuedPrefillTokens int
	// Waiting is how many requests wait to be admitted; their prompts,
	// plus the one a chunked prefill is usually part-way through, share
	// QueuedPrefillTokens.
	Waiting            int
	Running            int
	ActiveDecodeBlocks int
}

// InputFor builds the gate's Input for a prompt of n tokens, cachedD of them
// cached on the decode worker d and cachedP on the prefill worker p (p.ID
// empty: none): prefill times from the workers' timing profiles, queues from
// their load (queueTime of the queued prefill tokens), and d's
// decode step from its running decodes at their mean context. The live
// frontend and `switchyard simulate` both ask the gate through it.
func InputFor(mode Mode, n, cachedD, cachedP int, d, p WorkerView) Input {
	in := Input{Mode: mode, PromptTokens: n, CachedD: cachedD, CachedP: cachedP, KVBytesPerToken: int64(d.KVBytesPerToken)}
	dp := d.Profile
	in.PrefillD = func(nt, ct int) time.Duration { return prefillTime(&dp, nt, ct) }
	in.ChunkTokensD = dp.MaxBatchTokens
	if l := d.Load; l != nil {
		in.QueueD = queueTime(&dp, l.QueuedPrefillTokens, l.Waiting+1)
		in.RunningDecodesD = l.Running
		if l.Running > 0 && dp.PeakFLOPS > 0 {
			var w perfmodel.Work
			ctx := l.ActiveDecodeBlocks * d.BlockSize / l.Running
			for i := 0; i < l.Running; i++ {
				w.Add(1, ctx)
			}
			in.DecodeStepD = perfmodel.StepTime(&dp, w)
		}
	}
	if p.ID != "" {
		pp := p.Profile
		in.PrefillP = func(nt, ct int) time.Duration { return prefillTime(&pp, nt, ct) }
		in.Link = Link{From: p.ID, To: d.ID}
		switch {
		case dp.PeakFLOPS <= 0:
			in.Unpriced = d.ID
		case pp.PeakFLOPS <= 0:
			in.Unpriced = p.ID
		}
		if l := p.Load; l != nil {
			in.QueueP = queueTime(&pp, l.QueuedPrefillTokens, l.Waiting+1)
		}
	}
	return in
}

// prefillTime is perfmodel.PrefillTime, or 0 for a worker with no timing
// profile (whose zero rates would divide by zero); such a pair is marked
// Unpriced and never decided on these times.
func prefillTime(p *bus.Profile, newTokens, cachedTokens int) time.Duration {
	if p.PeakFLOPS <= 0 {
		return 0
	}
	return perfmodel.PrefillTime(p, newTokens, cachedTokens)
}

// queueTime predicts how long a worker takes to compute tokens of queued
// prefill spread over prompts separate prompts: each prompt attends to its
// own tokens only, and steps pack the chunk budget across prompts as the
// scheduler does. The load report gives no prompt sizes, so the tokens are
// spread evenly; unequal prompts attend more (the sum of squares grows), so
// this leans low. Pricing the queue as one prompt of all its tokens, as the
// gate did before, charged attention across prompts, quadratic in the
// queue: on 1 Gbit/s llama-3.1-70b (README, "The gate on a busy link") it
// over-predicted local TTFT by a median 16 s and sent requests remote that
// were faster local; spread over the prompts the median error is 2.8 s
// under.
func queueTime(p *bus.Profile, tokens, prompts int) time.Duration {
	if tokens <= 0 || p.PeakFLOPS <= 0 {
		return 0
	}
	n := min(max(prompts, 1), tokens)
	each := tokens / n
	chunk := p.MaxBatchTokens
	if chunk <= 0 {
		// Unchunked: one prompt per step.
		return time.Duration(n) * perfmodel.PrefillTime(p, each, 0)
	}
	var one perfmodel.Work // one prompt, chunk by chunk
	for done := 0; done < each; done += chunk {
		one.Add(min(chunk, each-done), done)
	}
	steps := (tokens + chunk - 1) / chunk
	per := perfmodel.Work{
		Tokens:       (tokens + steps - 1) / steps,
		AttnPairs:    one.AttnPairs * float64(n) / float64(steps),
		KVReadTokens: int(float64(one.KVReadTokens) * float64(n) / float64(steps)),
	}
	return time.Duration(steps) * perfmodel.StepTime(p, per)
}
