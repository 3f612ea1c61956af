package frontend

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// Index agreement: on every response the frontend compares the prefix the
// KV-event index predicted cached on the chosen worker with what the
// engine says it served from cache (usage.prompt_tokens_details.
// cached_tokens). Causes nobody anticipated (lost or undecodable events, a
// tokenizer or chat-template mismatch, missed removals, a wrong block size)
// all show up as a systematic difference between the two, so the check
// does not depend on knowing them.
//
// A request is judged when either side claims a hit. It is
//   - blind when the engine served at least one block more than the index
//     predicted, and the index still does not show those tokens on the
//     worker agreeBlindGrace after the response is in. A request racing
//     another that was computing the same prefix is excused: the blocks'
//     Stored event was published before the engine served them, but it
//     travels over the bus while the answer travels over HTTP, and on a
//     loaded host the answer can arrive first;
//   - stale when the index predicted at least one block more than the
//     engine served, counting only GPU-tier blocks (an engine may decline
//     to load lower tiers) and allowing for the engine recomputing the last
//     token of a prompt it holds whole (vLLM and the simulated engine do).
//
// A worker becomes inconsistent when its window (the last agreeWindow
// judged requests, none older than agreeWindowAge) holds disagreement of
// one kind that is no noise (systematic): at least agreeTripMajority
// requests making a majority of the window, or at least agreeTripCount
// making a quarter of it. Honest noise (a block evicted between the pick
// and the prefill) stays far below that. It recovers once a fresh window
// of agreeRecoverCount judged requests disagrees on fewer than a tenth of
// them.
const (
	agreeWindow       = 50
	agreeWindowAge    = 60 * time.Second
	agreeTripMajority = 4
	agreeTripCount    = 8
	agreeRecoverCount = 20
	// agreeBlindGrace is how long a blind verdict waits for the worker's
	// events before it counts: longer than a healthy bus takes to deliver
	// a batch on a loaded host, short enough that a worker whose events are
	// lost turns inconsistent within seconds.
	agreeBlindGrace = 2 * time.Second
	// agreeMaxPending bounds the blind verdicts waiting out the grace per
	// worker (each holds its prompt's block hashes); past it a blind
	// verdict counts at once, which is what a worker that blind has earned.
	agreeMaxPending = 64
	// agreeLogEvery bounds the log line repeating an inconsistent
	// worker's figures; changes of state are always logged.
	agreeLogEvery = time.Minute
)

// StateInconsistent is the event state of a worker whose prefix index
// disagrees with what its engine serves from cache, or whose bridge drops
// a share of its engine's events. The router then uses the approximate
// index for it, as for a silent worker.
const StateInconsistent = "inconsistent"

// Verdicts on one response.
const (
	verdictAgree uint8 = iota
	verdictBlind
	verdictStale
)

// judge classifies one response: predicted and gpuPredicted are the tokens
// the index showed cached on the worker (in any tier, in the GPU tier),
// cached what the engine says it served, prompt the engine's prompt
// length, bs the block size.
func judge(predicted, gpuPredicted, cached, prompt, bs int) uint8 {
	if cached >= predicted+bs {
		return verdictBlind
	}
	want := gpuPredicted
	if prompt > 0 {
		// An engine holding the whole prompt still computes its last token.
		want = min(want, (prompt-1)/bs*bs)
	}
	if cached+bs <= want {
		return verdictStale
	}
	return verdictAgree
}

// AgreementStatus is one worker's index agreement in /health: totals since
// the frontend started, and the current window.
type AgreementStatus struct {
	Requests        uint64 `json:"requests"`         // responses judged: either side claimed a hit
	PredictedTokens uint64 `json:"predicted_tokens"` // cached tokens the index predicted on them
	CachedTokens    uint64 `json:"engine_cached_tokens"`
	Blind           uint64 `json:"blind"` // the engine served cached tokens the index did not predict
	Stale           uint64 `json:"stale"` // the index predicted blocks the engine did not serve
	// Trips counts the times the worker became inconsistent.
	Trips uint64 `json:"trips"`
	// Unreported counts answers whose usage had no cached_tokens: the
	// engine does not say what it served (vLLM needs
	// --enable-prompt-tokens-details), so they are not judged.
	Unreported uint64 `json:"unreported"`
	// Pending counts blind responses waiting out agreeBlindGrace for their
	// KV events before they are judged; a reader wanting every response
	// judged waits for 0.
	Pending     int `json:"pending"`
	Window      int `json:"window"`
	WindowBlind int `json:"window_blind"`
	WindowStale int `json:"window_stale"`
	// Agreement is the share of the window's requests that agreed; 1 for
	// an empty window.
	Agreement    float64 `json:"agreement"`
	Inconsistent bool    `json:"inconsistent,omitempty"`
	Cause        string  `json:"cause,omitempty"`
}

type agreeSample struct {
	at                int64 // unix nanoseconds
	predicted, cached int32
	verdict           uint8
}

// agreement is one worker's window. The zero value is an empty window.
type agreement struct {
	unreported atomic.Uint64
	pending    atomic.Int32 // blind verdicts waiting out agreeBlindGrace

	mu   sync.Mutex // guards everything below
	ring [agreeWindow]agreeSample
	head int // oldest sample
	n    int
	// Counts and token sums of the window's blind and stale samples.
	blind, stale           int
	blindPred, blindCached int64
	stalePred, staleCached int64
	total                  AgreementStatus // cumulative fields only
	inconsistent           bool
	kind                   uint8 // verdictBlind or verdictStale, when inconsistent
	cause                  string
	since                  time.Time
	lastLog                time.Time
	// The worker's series, looked up once: WithLabelValues per response
	// would hash the label on every call.
	predictedCtr, cachedCtr prometheus.Counter
	agreeGauge              prometheus.Gauge
}

// agreeChange is a change of a worker's agreement state, for the log.
type agreeChange struct {
	changed, inconsistent, repeat bool
	cause                         string
}

// pop drops the oldest sample. Called with mu held and n > 0.
func (a *agreement) pop() {
	o := &a.ring[a.head]
	switch o.verdict {
	case verdictBlind:
		a.blind--
		a.blindPred -= int64(o.predicted)
		a.blindCached -= int64(o.cached)
	case verdictStale:
		a.stale--
		a.stalePred -= int64(o.predicted)
		a.staleCached -= int64(o.cached)
	}
	a.head = (a.head + 1) % agreeWindow
	a.n--
}

// reset empties the window. Called with mu held.
func (a *agreement) reset() {
	a.head, a.n = 0, 0
	a.blind, a.stale = 0, 0
	a.blindPred, a.blindCached, a.stalePred, a.staleCached = 0, 0, 0, 0
}

// add puts one judged response of worker in the window, counts it in m's
// series and re-judges the worker. It does not allocate except when the
// state changes (the cause) and on the worker's first response (its
// series).
func (a *agreement) add(now time.Time, m *metrics, worker string, predicted, cached int, v uint8) agreeChange {
	at := now.UnixNano()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.predictedCtr == nil {
		a.predictedCtr = m.indexPredicted.WithLabelValues(worker)
		a.cachedCtr = m.engineCached.WithLabelValues(worker)
		a.agreeGauge = m.indexAgreement.WithLabelValues(worker)
	}
	a.predictedCtr.Add(float64(predicted))
	a.cachedCtr.Add(float64(cached))
	for a.n > 0 && at-a.ring[a.head].at > int64(agreeWindowAge) {
		a.pop()
	}
	if a.n == agreeWindow {
		a.pop()
	}
	a.ring[(a.head+a.n)%agreeWindow] = agreeSample{at: at, predicted: int32(min(predicted, 1<<30)), cached: int32(min(cached, 1<<30)), verdict: v}
	a.n++
	a.total.Requests++
	a.total.PredictedTokens += uint64(predicted)
	a.total.CachedTokens += uint64(cached)
	switch v {
	case verdictBlind:
		a.total.Blind++
		a.blind++
		a.blindPred += int64(predicted)
		a.blindCached += int64(cached)
	case verdictStale:
		a.total.Stale++
		a.stale++
		a.stalePred += int64(predicted)
		a.staleCached += int64(cached)
	}
	a.agreeGauge.Set(a.shareLocked())
	var ch agreeChange
	switch {
	case !a.inconsistent:
		kind, count := verdictBlind, a.blind
		if a.stale > a.blind {
			kind, count = verdictStale, a.stale
		}
		if systematic(count, a.n) {
			a.inconsistent, a.kind, a.since = true, kind, now
			a.total.Trips++
			a.cause = a.causeLocked(now)
			// Recovery is judged on requests after the trip alone.
			a.reset()
			ch = agreeChange{changed: true, inconsistent: true, cause: a.cause}
			a.lastLog = now
		}
	case a.n >= agreeRecoverCount && 10*(a.blind+a.stale) < a.n:
		a.inconsistent = false
		ch = agreeChange{changed: true, cause: fmt.Sprintf("index agrees with the engine again: %d of the last %d requests agreed", a.n-a.blind-a.stale, a.n)}
		a.cause = ""
	default:
		// Still inconsistent: refresh the figures from the new window
		// once it shows the disagreement on its own, and repeat them in
		// the log at most every agreeLogEvery.
		if systematic(max(a.blind, a.stale), a.n) && now.Sub(a.lastLog) >= agreeLogEvery {
			if a.stale > a.blind {
				a.kind = verdictStale
			} else {
				a.kind = verdictBlind
			}
			a.cause = a.causeLocked(now)
			a.lastLog = now
			ch = agreeChange{repeat: true, inconsistent: true, cause: a.cause}
		}
	}
	return ch
}

// systematic reports whether count disagreeing requests of one kind in a
// window of n are more than noise.
func systematic(count, n int) bool {
	return count >= agreeTripMajority && 2*count > n || count >= agreeTripCount && 4*count >= n
}

// shareLocked is the share of the window that agreed.
func (a *agreement) shareLocked() float64 {
	if a.n == 0 {
		return 1
	}
	return float64(a.n-a.blind-a.stale) / float64(a.n)
}

// causeLocked says, with figures, why the window is inconsistent.
func (a *agreement) causeLocked(now time.Time) string {
	span := time.Duration(now.UnixNano() - a.ring[a.head].at).Round(time.Second)
	if a.kind == verdictStale {
		return fmt.Sprintf("index stale: the index predicted %d cached tokens where the engine served %d, on %d of %d requests in %v (missed block removals, a wrong block size, or evictions the events never showed)",
			a.stalePred, a.staleCached, a.stale, a.n, span)
	}
	return fmt.Sprintf("index blind: the engine served %d cached tokens where the index predicted %d, on %d of %d requests in %v (lost or undecodable KV events, or a tokenizer, chat-template or hash-seed mismatch)",
		a.blindCached, a.blindPred, a.blind, a.n, span)
}

// status reports the totals and the window.
func (a *agreement) status() AgreementStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.total
	st.Unreported = a.unreported.Load()
	st.Pending = int(a.pending.Load())
	st.Window, st.WindowBlind, st.WindowStale = a.n, a.blind, a.stale
	st.Agreement = a.shareLocked()
	st.Inconsistent, st.Cause = a.inconsistent, a.cause
	return st
}

// isInconsistent reports whether the worker is inconsistent now.
func (a *agreement) isInconsistent() (bool, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inconsistent, a.cause
}

// agreeInput is what one response tells about the worker's index.
type agreeInput struct {
	worker       string
	hashes       []uint64 // the prompt's block hashes, to re-check a blind response
	predicted    int      // blocks the index showed on the worker at the pick
	gpuPredicted int      // of which in the GPU tier
	blockSize    int      // the model's block size; 0: the frontend's
	usage        *openai.Usage
}

// agree judges one response (see the comment at the top of this file). It
// costs one map lookup and a short critical section, and allocates nothing
// while the worker's state stands (BenchmarkAgree, TestAgreeAllocs); a blind
// response also costs an index lookup, and one more with a timer and a copy
// of its hashes when it has to wait out the grace.
func (s *Server) agree(in agreeInput) {
	u := in.usage
	if u == nil || u.PromptTokensDetails == nil {
		// The engine does not say what it served from cache.
		s.workerState(in.worker).agree.unreported.Add(1)
		return
	}
	bs := in.blockSize
	if bs <= 0 {
		bs = s.cfg.BlockSize
	}
	pred, cached := in.predicted*bs, u.PromptTokensDetails.CachedTokens
	if pred == 0 && cached == 0 {
		return
	}
	gpu := pred
	if in.gpuPredicted >= 0 {
		gpu = in.gpuPredicted * bs
	}
	v := judge(pred, gpu, cached, u.PromptTokens, bs)
	ws := s.workerState(in.worker)
	if v == verdictBlind && s.deps.Index != nil {
		switch {
		case s.indexed(in.worker, in.hashes, cached, bs):
			// The index has the blocks now: they were in flight when the
			// router looked (another request was computing the same prefix).
			v = verdictAgree
		case s.blindGrace > 0 && ws.agree.pending.Load() < agreeMaxPending:
			// Their event may still be on the bus: look again later.
			s.recheckBlind(ws, in.worker, in.hashes[:min(len(in.hashes), (cached+bs-1)/bs)], pred, cached, bs)
			return
		}
	}
	s.logAgree(in.worker, ws.agree.add(time.Now(), s.m, in.worker, pred, cached, v))
}

// recheckBlind judges a blind response again once the grace has passed,
// on a copy of the hashes of its cached blocks. The verdict goes in the
// window at the time of the response, so that the cause's span is the
// requests'.
func (s *Server) recheckBlind(ws *workerState, worker string, hashes []uint64, pred, cached, bs int) {
	at := time.Now()
	hashes = append([]uint64(nil), hashes...)
	ws.agree.pending.Add(1)
	s.afterFunc(s.blindGrace, func() {
		defer ws.agree.pending.Add(-1)
		v := verdictBlind
		if s.indexed(worker, hashes, cached, bs) {
			v = verdictAgree
		}
		s.logAgree(worker, ws.agree.add(at, s.m, worker, pred, cached, v))
	})
}

// indexed reports whether the index shows at least cached tokens of the
// prompt's blocks on worker.
func (s *Server) indexed(worker string, hashes []uint64, cached, bs int) bool {
	return s.deps.Index.Overlaps(hashes)[worker]*bs >= cached
}

// logAgree logs a change of a worker's agreement state.
func (s *Server) logAgree(worker string, ch agreeChange) {
	switch {
	case ch.changed && ch.inconsistent:
		s.log.Warn("worker's KV index is inconsistent with its engine; routing it by the approximate index", "worker", worker, "cause", ch.cause)
	case ch.changed:
		s.log.Info("worker's KV index is consistent again", "worker", worker, "cause", ch.cause)
	case ch.repeat:
		s.log.Warn("worker's KV index is still inconsistent with its engine", "worker", worker, "cause", ch.cause)
	}
}

// inconsistent reports whether worker id's index was found inconsistent
// with its engine, or its bridge drifting, and why.
func (s *Server) inconsistent(id string) (bool, string) {
	v, ok := s.inflight.Load(id)
	if !ok {
		return false, ""
	}
	ws := v.(*workerState)
	bad, cause := ws.agree.isInconsistent()
	if _, drifting, dcause := ws.drift.state(); drifting {
		if bad {
			return true, cause + "; " + dcause
		}
		return true, dcause
	}
	return bad, cause
}

// indexSuspects lists the candidates found inconsistent, nil when none is.
func (s *Server) indexSuspects(ids []string) []string {
	var out []string
	for _, id := range ids {
		if bad, _ := s.inconsistent(id); bad {
			out = append(out, id)
		}
	}
	return out
}
