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
	Running             int
	ActiveDecodeBlocks  int
}

// InputFor builds the gate's Input for a prompt of n tokens, cachedD of them
// cached on the decode worker d and cachedP on the prefill worker p (p.ID
// empty: none): prefill times from the workers' timing profiles, queues from
// their load (the queued prefill tokens' predicted prefill time), and d's
// decode step from its running decodes at their mean context. The live
// frontend and `switchyard simulate` both ask the gate through it.
func InputFor(mode Mode, n, cachedD, cachedP int, d, p WorkerView) Input {
	in := Input{Mode: mode, PromptTokens: n, CachedD: cachedD, CachedP: cachedP, KVBytesPerToken: int64(d.KVBytesPerToken)}
	dp := d.Profile
	in.PrefillD = func(nt, ct int) time.Duration { return prefillTime(&dp, nt, ct) }
	in.ChunkTokensD = dp.MaxBatchTokens
	if l := d.Load; l != nil {
		in.QueueD = prefillTime(&dp, l.QueuedPrefillTokens, 0)
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
			in.QueueP = prefillTime(&pp, l.QueuedPrefillTokens, 0)
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
