package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// route is where one request goes and why.
type route struct {
	target  Worker
	overlap int    // blocks, per the router
	tiers   [3]int // overlap blocks by tier
	approx  bool
	policy  string
	// indexOverlap is the overlap the KV-event index alone showed on
	// target (the router's overlap may be the approximate index's).
	indexOverlap int

	gated   bool   // the gate was consulted
	mode    string // the disaggregation mode in force, when gated
	gate    GateDecision
	prefill Worker // the prefill worker, when gate.Remote
	// prefillOverlap is the prompt's leading blocks prefill holds, as the
	// router saw them (0 when the gate chose another prefill worker).
	prefillOverlap int
	// prefillIndex is the overlap the KV-event index alone showed on
	// prefill, known (prefillJudged) when the router picked it: the
	// prefill's cache report is checked against it.
	prefillIndex  int
	prefillJudged bool

	// kvMeasured says the decode worker reported its KV pull: kvBytes
	// arrived in pull (headers x-kv-pulled-bytes, x-kv-pull-ms). A worker
	// that does not report them leaves the bytes moved unknown.
	kvMeasured bool
	kvBytes    int64
	pull       time.Duration
}

// Headers a decode worker answers with when it pulled a remote prefill's
// KV blocks before scheduling the request: what it received and verified,
// and how long that took.
const (
	workerHeaderPulledBytes = "x-kv-pulled-bytes"
	workerHeaderPullMS      = "x-kv-pull-ms"
)

// prefillBlocks are the prompt blocks rt.target must compute: none when
// they arrive by KV transfer from a remote prefill.
func (rt *route) prefillBlocks(pr *parsedRequest) int {
	if rt.gated && rt.gate.Remote {
		return 0
	}
	return rt.newBlocks(pr)
}

// newBlocks are the prompt's full blocks rt.target will store that the
// router did not see there: computed, or transferred from a remote prefill.
func (rt *route) newBlocks(pr *parsedRequest) int {
	return max(0, len(pr.hashes)-rt.overlap)
}

// promptBlocks are the blocks pr's prompt holds on a worker, a partial
// last block included.
func (s *Server) promptBlocks(pr *parsedRequest) int {
	bs := pr.model.blockSize
	return (len(pr.tokens) + bs - 1) / bs
}

// release gives back the picks of workers that reqID did not reach (see
// InFlight).
func (s *Server) release(reqID string, workers ...string) {
	if s.deps.InFlight == nil {
		return
	}
	for _, id := range workers {
		s.deps.InFlight.Release(id, reqID)
	}
}

// measureTransfer records the KV pull the decode worker reports in h, for
// a request it was sent with a remote prefill's kv_transfer_params.
func (rt *route) measureTransfer(h *workerAnswer) {
	rt.kvMeasured, rt.kvBytes, rt.pull = false, 0, 0
	if !rt.gated || !rt.gate.Remote {
		return
	}
	n, err := strconv.ParseInt(h.header(workerHeaderPulledBytes), 10, 64)
	if err != nil || n < 0 {
		return
	}
	ms, err := strconv.ParseFloat(h.header(workerHeaderPullMS), 64)
	if err != nil || ms < 0 {
		return
	}
	rt.kvMeasured, rt.kvBytes, rt.pull = true, n, time.Duration(ms*float64(time.Millisecond))
}

func (s *Server) handleCompletion(ep endpoint) http.HandlerFunc {
	return s.handleGenerate(ep, func(w http.ResponseWriter, r *http.Request, _ string) (*parsedRequest, *apiError) {
		return s.readRequest(w, r, ep)
	})
}

// parseFunc reads and validates one request of an endpoint; reqID is the
// request's id, for answers that carry one of their own.
type parseFunc func(w http.ResponseWriter, r *http.Request, reqID string) (*parsedRequest, *apiError)

// handleGenerate is every generating endpoint's pipeline: draining,
// authentication, parse, the tenant's cache salt, load shedding,
// admission, then routing and forwarding (serve). Errors take the shape of
// ep's API; a Messages or Responses request is answered through its
// translator.
func (s *Server) handleGenerate(ep endpoint, parse parseFunc) http.HandlerFunc {
	return func(w0 http.ResponseWriter, r *http.Request) {
		start := time.Now()
		w := &statusWriter{ResponseWriter: w0}
		// The model label is a name some worker registered, never the
		// client's text: an unknown or unread model is "unknown".
		model := "unknown"
		defer func() {
			code := w.status
			if code == 0 {
				code = 499 // client went away before any answer (nginx's convention)
			}
			s.m.requests.WithLabelValues(ep.name, strconv.Itoa(code)).Inc()
			s.m.modelRequests.WithLabelValues(model, strconv.Itoa(code)).Inc()
		}()
		fail := func(e *apiError) { s.failAPI(w, ep.name, e) }
		s.serving.Add(1)
		defer s.serving.Add(-1)
		if s.draining.Load() {
			w.Header().Set("Connection", "close")
			fail(&apiError{status: http.StatusServiceUnavailable, typ: openai.TypeUnavailable, retryAfter: "1", kind: errKindNoWorkers,
				msg: "frontend: this frontend is draining (shutting down); send the request to another replica"})
			return
		}
		tenant, ok := s.tenantOf(r)
		if !ok {
			fail(&apiError{status: http.StatusUnauthorized, typ: openai.TypeAuthentication,
				msg: "frontend: missing or wrong API key: send Authorization: Bearer <key>", kind: errKindUnauthorized})
			return
		}
		pin := first(r.Header, canonPin)
		if pin != "" && !s.adminAuthorized(r) {
			fail(&apiError{status: http.StatusForbidden, typ: openai.TypeAuthentication, param: HeaderPinWorker,
				msg: "frontend: " + HeaderPinWorker + " needs admin access", kind: errKindUnauthorized})
			return
		}
		reqID := first(w.Header(), canonRequestID) // set by Handler before any route runs
		if first(r.Header, canonRequestID) == reqID {
			// The client chose it, so it need not be unique; load tracking
			// and gate decisions are keyed by it. Keep the client's id first
			// for correlation and make it unique.
			reqID += "." + s.newRequestID()
		}
		pr, aerr := parse(w, r, reqID)
		if pr != nil {
			model = pr.model.name
			pr.timing[stageStart] = start
		}
		if aerr == nil {
			aerr = s.applyTenant(pr, tenant)
		}
		if aerr != nil {
			fail(aerr)
			return
		}
		if pr.api != nil && pr.req.CacheSalt != "" {
			// Only the chat translation carries the tenant's salt.
			pr.api.salted = true
		}
		// A debug pin skips admission; previous_response_id's worker is a
		// route like another.
		admitted := pin == ""
		if pr.api != nil && pr.api.prevWorker != "" {
			if pin != "" && pin != pr.api.prevWorker {
				fail(badRequest("previous_response_id", "frontend: previous_response_id is stored on worker %s, but %s pins %s", pr.api.prevWorker, HeaderPinWorker, pin))
				return
			}
			pin = pr.api.prevWorker
		}
		// Counted once the body is in: a client trickling its body must not
		// hold a slot (ClientReadTimeout bounds it instead).
		if max := s.cfg.MaxInflight; max > 0 {
			if s.active.Add(1) > int64(max) {
				s.active.Add(-1)
				fail(s.shedError("global", fmt.Sprintf("frontend: %d requests in flight, the --max-inflight limit; retry after the Retry-After delay", max)))
				return
			}
			defer s.active.Add(-1)
		}
		if admitted {
			tk, aerr := s.admitRequest(r.Context(), w, r, pr, tenant)
			if aerr != nil {
				if aerr.kind == errKindClientCanceled {
					s.m.errors.WithLabelValues(aerr.kind).Inc()
				} else {
					fail(aerr)
				}
				return
			}
			defer tk.Release()
		}
		pr.timing.mark(stageAdmit)
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		var out http.ResponseWriter = w
		if pr.api != nil {
			out = pr.api.tr
		}
		if aerr := s.serve(ctx, out, r, ep, pr, reqID, pin, start); aerr != nil {
			fail(aerr)
			return
		}
		if pr.api != nil {
			pr.api.finish(s)
		}
	}
}

// fail writes an OpenAI error and counts it, unless it was counted where
// it happened.
func (s *Server) fail(w http.ResponseWriter, e *apiError) {
	if !e.counted {
		s.m.errors.WithLabelValues(e.kind).Inc()
	}
	if e.retryAfter != "" {
		w.Header().Set("Retry-After", e.retryAfter)
	}
	if e.code != "" {
		openai.WriteCodedError(w, e.status, e.typ, e.param, e.code, e.msg)
		return
	}
	openai.WriteError(w, e.status, e.typ, e.param, e.msg)
}

// serve routes and forwards one validated request. It returns an error only
// if nothing has been written to w yet.
func (s *Server) serve(ctx context.Context, w http.ResponseWriter, r *http.Request, ep endpoint, pr *parsedRequest, reqID, pin string, start time.Time) *apiError {
	workers := pr.workers
	var rt route
	var serving []Worker
	// The workers a pick booked this request on that no forward or remote
	// prefill has taken over (they finish their own): released on any way
	// out, an error or the client leaving during a remote prefill.
	var booked []string
	defer func() { s.release(reqID, booked...) }()
	defer pr.runAfter()
	takeOver := func(id string) { booked = slices.DeleteFunc(booked, func(b string) bool { return b == id }) }
	if pin != "" {
		i := slices.IndexFunc(workers, func(wk Worker) bool { return wk.ID == pin })
		if i < 0 {
			return badRequest(HeaderPinWorker, "frontend: pinned worker %q is not registered", pin)
		}
		rt = route{target: workers[i], policy: "pinned"}
		if pr.api != nil && pr.api.prevWorker == pin {
			rt.policy = "previous_response"
		}
		if s.deps.Index != nil {
			rt.overlap = s.deps.Index.Overlaps(pr.hashes)[pin]
		}
		rt.indexOverlap = rt.overlap
	} else {
		serving = s.servingWorkers(workers, &pr.model)
		if len(serving) == 0 {
			return s.unavailable(workers, &pr.model)
		}
		if ep.name == APIEmbeddings {
			if serving = slices.DeleteFunc(serving, func(wk Worker) bool { return !wk.serves(APIEmbeddings) }); len(serving) == 0 {
				return &apiError{status: http.StatusServiceUnavailable, typ: openai.TypeUnavailable, kind: errKindNoWorkers,
					msg: fmt.Sprintf("frontend: no worker of model %q serves /v1/embeddings", pr.model.base)}
			}
		}
		serving = s.routable(serving)
		if serving = s.withRoom(serving); len(serving) == 0 {
			return s.shedError("worker", fmt.Sprintf("frontend: every worker has %d requests in flight, the --max-inflight-per-worker limit; retry after the Retry-After delay", s.cfg.MaxInflightPerWorker))
		}
		var aerr *apiError
		if rt, aerr = s.plan(ctx, pr, reqID, workers, serving, &booked); aerr != nil {
			return aerr
		}
	}

	pr.timing.mark(stageRoute)
	body := pr.body
	if rt.gated && rt.gate.Remote {
		takeOver(rt.prefill.ID)
		kvp, usage, err := s.remotePrefill(ctx, ep, pr, rt.prefill, rt.prefillOverlap, reqID)
		if err == nil && rt.prefillJudged {
			// The prefill leg is where a disaggregated prompt meets a
			// cache: its report is judged like an aggregated answer.
			s.agree(agreeInput{worker: rt.prefill.ID, hashes: pr.hashes, predicted: rt.prefillIndex, gpuPredicted: -1, blockSize: pr.model.blockSize, usage: usage})
		}
		if err == nil {
			body, err = rewriteBody(pr.body, map[string]json.RawMessage{"kv_transfer_params": kvp})
		}
		if err != nil {
			if r.Context().Err() != nil {
				s.m.errors.WithLabelValues(errKindClientCanceled).Inc()
				return nil
			}
			if ctx.Err() != nil {
				// RequestTimeout spent on the prefill: nothing left for decode.
				return &apiError{status: http.StatusGatewayTimeout, typ: openai.TypeServer, kind: errKindTimeout,
					msg: fmt.Sprintf("frontend: remote prefill on %s not done within %v: %v", rt.prefill.ID, s.cfg.RequestTimeout, err)}
			}
			s.m.fallbacks.Inc()
			s.m.errors.WithLabelValues(errKindPrefill).Inc()
			s.log.Warn("remote prefill failed; prefilling locally", "request_id", reqID,
				"prefill", rt.prefill.ID, "decode", rt.target.ID, "err", err)
			rt.gate.Remote = false
			rt.gate.Reason = "remote prefill failed, fell back to local: " + rt.gate.Reason
			body = pr.body
		}
	}

	for attempt := 0; ; attempt++ {
		takeOver(rt.target.ID)
		res, err := s.forward(ctx, w, r, ep, pr, body, reqID, &rt, start)
		if err == nil {
			// A retried request's TTFT includes the failed attempt: it is
			// no sample of the path taken, so the gate does not learn from it.
			// A non-streaming answer has no TTFT, but a measured KV
			// transfer is still worth learning the link from.
			if rt.gated && s.deps.Gate != nil && attempt == 0 && (res.ttft > 0 || rt.kvMeasured) {
				s.deps.Gate.Observe(rt.observation(reqID, res.ttft))
			}
			return nil
		}
		var ue *upstreamError
		if !errors.As(err, &ue) {
			ue = &upstreamError{worker: rt.target.ID, kind: errKindUpstreamConn, err: err}
		}
		if ue.clientGone {
			s.m.errors.WithLabelValues(errKindClientCanceled).Inc()
			return nil
		}
		// Each failed attempt counts once, here; the error the client gets
		// is not counted again.
		s.m.errors.WithLabelValues(ue.kind).Inc()
		s.log.Warn("worker failed before first byte", "request_id", reqID, "worker", rt.target.ID, "attempt", attempt, "kind", ue.kind, "err", err)
		final := &apiError{status: http.StatusBadGateway, typ: openai.TypeServer, msg: err.Error(), kind: ue.kind, counted: true}
		if ue.kind == errKindTimeout {
			final.status = http.StatusGatewayTimeout
		}
		if !ue.retry || attempt > 0 || pin != "" {
			return final
		}
		rest := slices.DeleteFunc(slices.Clone(serving), func(wk Worker) bool { return wk.ID == rt.target.ID })
		if len(rest) == 0 {
			final.msg += " (no other worker to retry on)"
			return final
		}
		dec, perr := s.pick(ctx, pr, reqID, rest, pr.maxTokens(), &booked)
		if perr != nil {
			final.msg = fmt.Sprintf("%v; retry: %v", err, perr)
			return final
		}
		s.m.retries.Inc()
		i := slices.IndexFunc(rest, func(wk Worker) bool { return wk.ID == dec.WorkerID })
		if rt.gated && rt.gate.Remote {
			// P's kv_transfer_params name blocks held for the failed decode
			// worker; another worker must prefill the prompt itself.
			s.m.fallbacks.Inc()
			s.log.Warn("decode worker failed after remote prefill; retrying with local prefill", "request_id", reqID,
				"prefill", rt.prefill.ID, "failed", rt.target.ID, "retry", dec.WorkerID)
			rt.gate.Remote = false
			rt.gate.Reason = fmt.Sprintf("decode worker %s failed after remote prefill, retried with local prefill: %s", rt.target.ID, rt.gate.Reason)
			body = pr.body
		}
		rt.target, rt.overlap, rt.tiers, rt.approx, rt.policy = rest[i], dec.OverlapBlocks, dec.TierBlocks, dec.Approx, dec.Policy
		rt.indexOverlap = dec.indexOverlap()
	}
}

// shedRetryAfter is the Retry-After of a shed request, in seconds: about
// the time a short completion takes to free a slot.
const shedRetryAfter = "1"

// shed answers 429 with Retry-After and counts it.
func (s *Server) shed(w http.ResponseWriter, scope, msg string) {
	s.fail(w, s.shedError(scope, msg))
}

func (s *Server) shedError(scope, msg string) *apiError {
	s.m.shed.WithLabelValues(scope).Inc()
	return &apiError{status: http.StatusTooManyRequests, typ: openai.TypeRateLimit, msg: msg, kind: errKindShed, retryAfter: shedRetryAfter}
}

// withRoom drops workers at MaxInflightPerWorker (counting the peer
// replicas' requests) and, when some other has room, those whose
// predicted prefill queue is over QueueTTFT. A request admission let in
// finds the slot it was counted against taken by a peer only in the
// moment before that peer's request was shared; it then goes where this
// frontend alone has room (overshooting by one) rather than being refused.
func (s *Server) withRoom(ws []Worker) []Worker {
	max := int64(s.cfg.MaxInflightPerWorker)
	room := func(peers bool) []Worker {
		out := ws[:0:0]
		for _, w := range ws {
			n := s.inflightCounter(w.ID).Load()
			if peers {
				n += int64(s.peerInFlight(w.ID))
			}
			if max <= 0 || n < max {
				out = append(out, w)
			}
		}
		return out
	}
	out := room(true)
	if len(out) == 0 {
		out = room(false)
	}
	if s.cfg.QueueTTFT > 0 {
		if fast := slices.DeleteFunc(slices.Clone(out), func(w Worker) bool { return s.overTTFT(w.ID) }); len(fast) > 0 {
			out = fast
		}
	}
	return out
}

// servingWorkers are the workers that may take a client request for mr:
// aggregated and decode workers of its pool; nil mr means any admitted
// worker.
func (s *Server) servingWorkers(all []Worker, mr *modelRoute) []Worker {
	out := make([]Worker, 0, len(all))
	for i := range all {
		wk := &all[i]
		if mr == nil && s.serves(wk) || mr != nil && servesRole(wk) && mr.serves(wk) {
			out = append(out, *wk)
		}
	}
	return out
}

// serves reports whether wk takes completions for this frontend's models.
func (s *Server) serves(wk *Worker) bool { return servesRole(wk) && s.admits(wk) }

// servesRole reports whether wk takes completions at all: an aggregated
// or decode worker that is not draining.
func servesRole(wk *Worker) bool {
	return (wk.Role == RoleAggregated || wk.Role == RoleDecode) && !wk.Draining
}

// unavailableReason says why no worker can serve mr (nil: any model), or
// "" if one can.
func (s *Server) unavailableReason(all []Worker, mr *modelRoute) string {
	if len(s.servingWorkers(all, mr)) > 0 {
		return ""
	}
	refused := s.deps.Workers.Refused()
	model := s.cfg.Model
	if mr != nil {
		model = mr.name
	}
	draining := 0
	for i := range all {
		if all[i].Draining {
			draining++
		}
	}
	switch {
	case len(all) == 0 && len(refused) == 0:
		return "no workers registered"
	case draining > 0 && draining == len(all):
		return fmt.Sprintf("all %d registered workers are draining (shutting down)", draining)
	case len(all) == 0:
		return fmt.Sprintf("all %d registered workers were refused (first: %s: %s)", len(refused), refused[0].ID, refused[0].Reason)
	case model == "":
		return fmt.Sprintf("no aggregated or decode worker (%d workers registered, %d refused)", len(all), len(refused))
	default:
		return fmt.Sprintf("no aggregated or decode worker serves model %q (%d workers registered, %d refused)", model, len(all), len(refused))
	}
}

// noWorkerRetryAfter is the Retry-After of a request no worker can take,
// in seconds: a worker registers within a registry refresh (2 s at the
// default TTL) of starting.
const noWorkerRetryAfter = "2"

func (s *Server) unavailable(all []Worker, mr *modelRoute) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, typ: openai.TypeUnavailable, retryAfter: noWorkerRetryAfter,
		msg: "frontend: no worker available: " + s.unavailableReason(all, mr), kind: errKindNoWorkers}
}

// pick asks the router to choose among candidates, which will decode
// maxTokens tokens at most (0: unknown, or none here), and checks its
// answer. It adds the worker picked to booked.
func (s *Server) pick(ctx context.Context, pr *parsedRequest, reqID string, candidates []Worker, maxTokens int, booked *[]string) (Decision, error) {
	if len(candidates) == 0 {
		return Decision{}, errNoCandidates
	}
	ids := make([]string, len(candidates))
	for i, wk := range candidates {
		ids[i] = wk.ID
	}
	dec, err := s.deps.Router.Pick(ctx, RouteRequest{RequestID: reqID, Hashes: pr.hashes, PromptTokens: len(pr.tokens), MaxTokens: maxTokens, Candidates: ids,
		IndexSuspect: s.indexSuspects(ids), Adapter: pr.model.adapter, BlockSize: pr.model.blockSize, Model: pr.model.base})
	if err != nil {
		return Decision{}, fmt.Errorf("frontend: router: %w", err)
	}
	if !slices.Contains(ids, dec.WorkerID) {
		s.release(reqID, dec.WorkerID)
		return Decision{}, fmt.Errorf("frontend: router picked %q, not a candidate", dec.WorkerID)
	}
	*booked = append(*booked, dec.WorkerID)
	if dec.After != nil {
		pr.after = append(pr.after, dec.After)
	}
	return dec, nil
}

// plan picks the serving worker and, when it is a decode worker and a
// prefill pool exists, asks the gate where prefill runs. It releases the
// prefill pool's pick unless that worker prefills remotely, and confirms
// the decode worker's pick with nothing to prefill when one does: the KV
// arrives by transfer, and the decode worker stays counted meanwhile.
func (s *Server) plan(ctx context.Context, pr *parsedRequest, reqID string, all, serving []Worker, booked *[]string) (route, *apiError) {
	dec, err := s.pick(ctx, pr, reqID, serving, pr.maxTokens(), booked)
	if err != nil {
		return route{}, &apiError{status: http.StatusServiceUnavailable, typ: openai.TypeUnavailable, msg: err.Error(), kind: errKindRouter}
	}
	i := slices.IndexFunc(serving, func(wk Worker) bool { return wk.ID == dec.WorkerID })
	rt := route{target: serving[i], overlap: dec.OverlapBlocks, tiers: dec.TierBlocks, approx: dec.Approx, policy: dec.Policy, indexOverlap: dec.indexOverlap()}
	mode := s.DisaggMode()
	if m, ok := s.cfg.ModelDisagg[pr.model.base]; ok {
		mode = m
	}
	// In mode never the gate is still asked: it answers local (mode_never)
	// with its predictions, so every decode response explains itself.
	if rt.target.Role != RoleDecode || s.deps.Gate == nil || pr.noKV {
		return rt, nil
	}
	var prefills []Worker
	for _, wk := range all {
		if wk.Role == RolePrefill && !wk.Draining && pr.model.serves(&wk) {
			prefills = append(prefills, wk)
		}
	}
	if len(prefills) == 0 {
		return rt, nil
	}
	prefills = s.routable(prefills)
	pdec, err := s.pick(ctx, pr, reqID, prefills, 0, booked) // it decodes on the decode worker
	if err != nil {
		// No usable prefill worker: prefill locally, and say so.
		rt.gated, rt.mode = true, mode
		rt.gate = GateDecision{Reason: "no prefill worker: " + err.Error()}
		return rt, nil
	}
	gd := s.deps.Gate.Decide(ctx, GateInput{
		RequestID: reqID, Mode: mode, PromptTokens: len(pr.tokens),
		Decode: rt.target.ID, DecodeOverlapBlocks: rt.overlap,
		Prefill: pdec.WorkerID, PrefillOverlapBlocks: pdec.OverlapBlocks,
	})
	if mode == DisaggNever && gd.Remote {
		// The mode is the operator's word; a gate cannot overrule it.
		gd.Remote, gd.Reason = false, "mode_never"
	}
	rt.gated, rt.mode, rt.gate = true, mode, gd
	if !gd.Remote {
		s.release(reqID, pdec.WorkerID)
		return rt, nil
	}
	pid := pdec.WorkerID
	if gd.Prefill != "" && gd.Prefill != pid {
		s.release(reqID, pid) // the worker the gate chose is counted at its Started
		pid = gd.Prefill
	} else {
		rt.prefillOverlap = pdec.OverlapBlocks
		rt.prefillIndex, rt.prefillJudged = pdec.indexOverlap(), true
	}
	j := slices.IndexFunc(prefills, func(wk Worker) bool { return wk.ID == pid })
	if j < 0 {
		rt.gate.Remote = false
		rt.gate.Reason = fmt.Sprintf("gate chose unknown prefill worker %q; prefilling locally", pid)
		return rt, nil
	}
	rt.prefill = prefills[j]
	if s.deps.InFlight != nil {
		s.deps.InFlight.Started(rt.target.ID, reqID, rt.prefillBlocks(pr), s.promptBlocks(pr))
	}
	return rt, nil
}

// indexOverlap is the overlap the KV-event index showed on d's worker.
func (d *Decision) indexOverlap() int {
	if d.Approx {
		return d.IndexBlocks
	}
	return d.OverlapBlocks
}

// indexTrusted reports whether worker id's index is in a state to be
// judged: its events healthy and the bus up. While either is not, the index
// is known to lag the engine (events lost in an outage come back with the
// resync's snapshot) and the worker is routed approximately already;
// judging it then filled the window with blind answers that kept a worker
// inconsistent well after the resync had made its index right.
func (s *Server) indexTrusted(id string) bool {
	if s.deps.Bus != nil && s.deps.Bus.BusStatus().Down {
		return false
	}
	if s.deps.Events != nil {
		if st, ok := s.deps.Events.EventStatus(id); ok && st.State != StateHealthy {
			return false
		}
	}
	return true
}

// agreeOn judges the index's prediction for rt against the usage its
// worker answered with (see agree.go). The decode worker of a remote
// prefill counts the KV it pulled as cached, which no index predicts, so
// it is not judged.
func (s *Server) agreeOn(rt *route, pr *parsedRequest, u *openai.Usage) {
	if rt.gated && rt.gate.Remote {
		return
	}
	if !s.indexTrusted(rt.target.ID) {
		return
	}
	gpu := -1 // unknown: the tiers are the approximate index's, or not known
	if !rt.approx && rt.tiers != [3]int{} {
		gpu = rt.tiers[0]
	}
	s.agree(agreeInput{worker: rt.target.ID, hashes: pr.hashes, predicted: rt.indexOverlap, gpuPredicted: gpu, blockSize: pr.model.blockSize, usage: u})
}

// Canonical forms of the route headers setRouteHeaders writes on every request.
var (
	canonWorker        = http.CanonicalHeaderKey(HeaderWorker)
	canonOverlapTokens = http.CanonicalHeaderKey(HeaderOverlapTokens)
	canonOverlapSource = http.CanonicalHeaderKey(HeaderOverlapSource)
	canonOverlapTiers  = http.CanonicalHeaderKey(HeaderOverlapTiers)
	canonPolicy        = http.CanonicalHeaderKey(HeaderPolicy)
)

// setRouteHeaders writes the x-switchyard-* headers of rt.
func (s *Server) setRouteHeaders(h http.Header, rt *route, bs int) {
	// Canonical keys assigned directly: Header.Set canonicalises (and, for
	// these lower-case names, allocates) every key on every request.
	// One backing array for the five values (a []string per header was
	// five allocations), each header a full slice of one element.
	v := new([5]string)
	set := func(key string, i int, val string) {
		v[i] = val
		h[key] = v[i : i+1 : i+1]
	}
	set(canonWorker, 0, rt.target.ID)
	set(canonOverlapTokens, 1, strconv.Itoa(rt.overlap*bs))
	src := "index"
	if rt.approx {
		src = "approx"
	}
	set(canonOverlapSource, 2, src)
	// All-zero tiers with an overlap come from a router that does not know
	// tiers; with none, zero in every tier is the answer, and is sent.
	if t := rt.tiers; t != [3]int{} || rt.overlap == 0 {
		var buf [48]byte
		b := append(buf[:0], "gpu="...)
		b = strconv.AppendInt(b, int64(t[0]*bs), 10)
		b = append(b, ",cpu="...)
		b = strconv.AppendInt(b, int64(t[1]*bs), 10)
		b = append(b, ",disk="...)
		b = strconv.AppendInt(b, int64(t[2]*bs), 10)
		set(canonOverlapTiers, 3, string(b))
	}
	set(canonPolicy, 4, rt.policy)
	if !rt.gated {
		return
	}
	where, pred := "local", rt.gate.PredictedLocal
	if rt.gate.Remote {
		where, pred = "remote", rt.gate.PredictedRemote
	}
	h.Set(HeaderDisaggMode, rt.mode)
	h.Set(HeaderPrefill, where)
	h.Set(HeaderDisaggReason, rt.gate.Reason)
	h.Set(HeaderPredictedTTFT, strconv.FormatFloat(float64(pred)/float64(time.Millisecond), 'f', 3, 64))
	h.Set(HeaderKVBytesPredicted, strconv.FormatInt(rt.gate.KVBytes, 10))
	switch {
	case !rt.gate.Remote:
		h.Set(HeaderKVBytes, "0") // prefilled locally: nothing moved
	case rt.kvMeasured:
		h.Set(HeaderKVBytes, strconv.FormatInt(rt.kvBytes, 10))
		h.Set(HeaderKVPullMS, strconv.FormatFloat(float64(rt.pull)/float64(time.Millisecond), 'f', 3, 64))
	}
}

// observation is what the gate learns from a completed gated request: the
// TTFT of the path taken and, for a remote prefill, the transfer the
// decode worker measured.
func (rt *route) observation(reqID string, ttft time.Duration) Observation {
	o := Observation{RequestID: reqID, Remote: rt.gate.Remote, TTFT: ttft, To: rt.target.ID, Predicted: rt.gate.PredictedLocal}
	if rt.gate.Remote {
		o.From, o.Predicted = rt.prefill.ID, rt.gate.PredictedRemote
		if rt.kvMeasured {
			o.KVBytes, o.Transfer = rt.kvBytes, rt.pull
		}
	}
	return o
}
