package frontend

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/upstream"
)

// maxResponseBytes bounds a non-streaming worker answer; a completion of
// 128k tokens of JSON is far below it.
const maxResponseBytes = 64 << 20

// upstreamError is a worker failure before any byte reached the client.
// retry says whether the request may go to another worker: only when the
// worker cannot be working on it (the connection failed before any
// response, or it answered 5xx or dropped the connection before any body
// byte). After a timeout the worker may still be generating, so a retry
// would run the request twice.
type upstreamError struct {
	worker     string
	kind       string
	retry      bool
	clientGone bool
	err        error
}

func (e *upstreamError) Error() string {
	return fmt.Sprintf("frontend: worker %s: %v", e.worker, e.err)
}

func (e *upstreamError) Unwrap() error { return e.err }

// attempt is one forward attempt's state shared with the callbacks of
// its timers and checks, in one allocation: what they report, its worker,
// its CancelWorker record and what the relay learns.
type attempt struct {
	idleFired, headerFired atomic.Bool
	wdErr                  atomic.Value // why the watchdog gave up on the worker
	suspectErr             atomic.Value // why the suspect check gave up on it
	suspectState           atomic.Int32 // 0 armed, 1 stopped, 2 fired
	finished               bool         // InFlight was told the request is done
	inflight               InFlight     // told of the finish, when not nil
	reqID                  string
	tr                     tracked      // this attempt, for CancelWorker
	wk                     Worker       // the attempt's worker
	st                     relayState   // what the relay of a stream learns
	phase                  atomic.Int32 // phaseHeaders, then phaseBody: what the attempt's timer bounds
}

// finish tells InFlight the request is done, once: as soon as the worker's
// answer is complete (before the client sees its end and sends its next
// request, maybe to another replica that hears of the finish over the
// bus), or when forward returns.
func (a *attempt) finish() {
	if !a.finished && a.inflight != nil {
		a.finished = true
		a.inflight.Finished(a.wk.ID, a.reqID)
	}
}

const (
	phaseHeaders = iota // the timer is the header deadline (streaming only)
	phaseBody           // the timer is the idle deadline
)

// forwardResult is what the relay measured.
type forwardResult struct {
	ttft time.Duration // 0 when no content chunk was seen (non-streaming)
}

// The headers of every relayed stream, shared: each a full slice, so that
// an Add would copy it rather than write into it.
var (
	sseContentType  = []string{"text/event-stream"}[:1:1]
	sseCacheControl = []string{"no-cache"}[:1:1]
)

// readerPool holds the 64 KiB line readers of the SSE relay: one per
// request would otherwise be the relay's largest allocation.
var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// forward sends body to rt.target and relays the answer to w. It returns an
// *upstreamError, and has written nothing to w, if the worker failed before
// anything could be relayed; a failure after that is reported to the client
// in the stream and forward returns nil.
//
// The wait for response headers is bounded by HeaderTimeout for a
// streaming request and only by ctx (RequestTimeout) otherwise: a worker
// answering a non-streaming request sends its headers when generation is
// done.
func (s *Server) forward(ctx context.Context, w http.ResponseWriter, r *http.Request, ep endpoint, pr *parsedRequest, body []byte, reqID string, rt *route, start time.Time) (forwardResult, error) {
	// What the timers and checks below found, and the worker they ask
	// about, in one allocation: each variable the closures share would
	// otherwise be one of its own.
	var at attempt
	at.wk = rt.target
	wk := &at.wk
	// outcome labels this attempt in switchyard_worker_requests_total;
	// every failure path below sets it.
	outcome := outcomeOK
	defer func() { s.m.workerRequests.WithLabelValues(wk.ID, outcome).Inc() }()
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	// One timer serves the attempt: the header deadline of a streaming
	// request until the headers come, then the idle deadline between
	// reads (armed once headers arrive). at.phase says which fired.
	idle := time.AfterFunc(s.cfg.HeaderTimeout, func() {
		if at.phase.Load() == phaseHeaders {
			at.headerFired.Store(true)
		} else {
			at.idleFired.Store(true)
		}
		acancel()
	})
	if !pr.req.Stream {
		idle.Stop()
	}
	defer idle.Stop()

	at.inflight, at.reqID = s.deps.InFlight, reqID // for at.finish
	if s.deps.InFlight != nil {
		s.deps.InFlight.Started(wk.ID, reqID, rt.prefillBlocks(pr), s.promptBlocks(pr))
		defer at.finish()
		if sw, ok := s.deps.InFlight.(StoreWatcher); ok {
			sw.Stores(wk.ID, reqID, rt.newBlocks(pr))
		}
	}
	ctr := s.inflightCounter(wk.ID)
	ctr.Add(1)
	defer ctr.Add(-1)
	tr := &at.tr // in the attempt's allocation
	tr.cancel = acancel
	s.track(wk.ID, tr)
	defer tr.untrack()

	// classify names a failure; retry applies only if no timeout caused it.
	// Connect failures and timeouts count towards the worker's ejection.
	classify := func(err error, kind string, retry bool) *upstreamError {
		ue := &upstreamError{worker: wk.ID, kind: kind, retry: retry, err: err}
		defer func() {
			switch {
			case ue.clientGone:
				outcome = outcomeCanceled
			case ue.kind == errKindTimeout || ue.kind == errKindUpstreamIdle:
				outcome = outcomeTimeout
			default:
				outcome = outcomeError
			}
			switch {
			case ue.clientGone || ue.kind == errKindWorkerGone:
			case ue.kind == errKindUpstreamConn:
				s.noteFailure(*wk, false, ue.err)
			case ue.kind == errKindTimeout || ue.kind == errKindUpstreamIdle:
				s.noteFailure(*wk, true, ue.err)
			}
		}()
		switch {
		case r.Context().Err() != nil:
			ue.clientGone, ue.retry = true, false
		case tr.gone.Load():
			// Its answer could never reach the client: another worker may
			// run the request if nothing was relayed yet.
			ue.kind, ue.retry = errKindWorkerGone, true
			ue.err = fmt.Errorf("left the registry (%v): %w", tr.cause.Load(), err)
		case at.suspectErr.Load() != nil:
			// Frozen or gone before answering anything: another worker
			// may run the request, and this one is ejected (a timeout).
			ue.kind, ue.retry = errKindTimeout, true
			ue.err = fmt.Errorf("no answer within %v and its health check fails (%v): %w", s.cfg.SuspectAfter, at.suspectErr.Load(), err)
		case at.idleFired.Load():
			ue.kind, ue.retry = errKindUpstreamIdle, false
			ue.err = fmt.Errorf("no data for %v: %w", s.cfg.IdleTimeout, err)
		case at.headerFired.Load() && !pr.req.Stream:
			ue.kind, ue.retry = errKindTimeout, false
			ue.err = fmt.Errorf("no answer within %v and the worker fails its liveness check (%v): %w", s.cfg.HeaderTimeout, at.wdErr.Load(), err)
		case at.headerFired.Load():
			ue.kind, ue.retry = errKindTimeout, false
			ue.err = fmt.Errorf("no response headers within %v: %w", s.cfg.HeaderTimeout, err)
		case ctx.Err() != nil:
			ue.kind, ue.retry = errKindTimeout, false
			ue.err = fmt.Errorf("request not done within %v: %w", s.cfg.RequestTimeout, err)
		}
		return ue
	}

	// A translated request asks for usage itself (the API reports it), so
	// withStreamUsage leaves its chat body alone.
	body, stripUsage, err := withStreamUsage(body, &pr.req)
	if err != nil {
		return forwardResult{}, classify(err, errKindUpstreamConn, false)
	}
	path := ep.path
	if pr.api != nil {
		path, body = pr.api.prepareAttempt(*wk, rt, path, body)
	}
	var wd *watchdog
	// The suspect check: a worker that has not answered within
	// SuspectAfter has its health checked; a failed check gives this
	// attempt up (retried elsewhere, nothing was relayed) and ejects it.
	suspect := time.AfterFunc(s.cfg.SuspectAfter, func() {
		if err := s.checkSuspect(actx, *wk); err != nil && at.suspectState.CompareAndSwap(0, 2) {
			at.suspectErr.Store(err)
			acancel()
		}
	})
	if !pr.req.Stream {
		wd = s.startWatchdog(actx, *wk, func(err error) { at.wdErr.Store(err); at.headerFired.Store(true); acancel() })
	}
	pr.timing.mark(stageAttempt)
	var sent func()
	if len(pr.after) > 0 {
		sent = pr.runAfter
	}
	resp, err := s.send(actx, wk.URL, path, body, reqID, sent)
	pr.timing.mark(stageUpstream)
	suspect.Stop()
	if !at.suspectState.CompareAndSwap(0, 1) && err == nil {
		// The check failed just as the headers came: the request is cancelled.
		resp.body.Close()
		err = context.Canceled
	}
	if pr.req.Stream && !idle.Stop() && err == nil || wd != nil && !wd.stop() && err == nil {
		// Headers came just as the deadline fired: the request is cancelled.
		resp.body.Close()
		err = context.Canceled
	}
	if err != nil {
		// A transport error before any response: connection refused, reset
		// or closed. The worker has no answer under way.
		return forwardResult{}, classify(err, errKindUpstreamConn, true)
	}
	defer resp.body.Close()
	s.noteSuccess(wk.ID)
	if resp.status >= 500 {
		snippet, _ := io.ReadAll(io.LimitReader(resp.body, 512))
		return forwardResult{}, classify(fmt.Errorf("status %d: %s", resp.status, bytes.TrimSpace(snippet)), errKindUpstreamStatus, true)
	}
	rt.measureTransfer(&resp)

	if !strings.HasPrefix(resp.header("Content-Type"), "text/event-stream") {
		at.phase.Store(phaseBody)
		idle.Reset(s.cfg.IdleTimeout)
		data, err := io.ReadAll(io.LimitReader(&idleReader{r: resp.body, t: idle, d: s.cfg.IdleTimeout}, maxResponseBytes+1))
		if err == nil && len(data) > maxResponseBytes {
			err = fmt.Errorf("answer exceeds %d bytes", maxResponseBytes)
		}
		if err != nil {
			// The worker did the work: do not run it twice.
			ue := classify(fmt.Errorf("failed while sending its answer: %w", err), errKindUpstreamStream, false)
			return forwardResult{}, ue
		}
		switch {
		case resp.status == http.StatusOK:
			if u, ok := openai.UsageOf(data); ok {
				s.countUsage(u)
				s.agreeOn(rt, pr, u)
			}
			if s.deps.InFlight != nil {
				s.deps.InFlight.FirstToken(wk.ID, reqID)
			}
		case resp.status >= 400:
			// Relayed as it is: the worker judged the request, and its
			// envelope says why.
			s.m.errors.WithLabelValues(errKindWorker4xx).Inc()
			outcome = outcomeRejected
		}
		at.finish()
		h := w.Header()
		h.Set("Content-Type", resp.header("Content-Type"))
		s.setRouteHeaders(h, rt, pr.model.blockSize)
		h[canonServerTiming] = []string{pr.timing.header()}
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.ClientStallTimeout))
		w.WriteHeader(resp.status)
		_, _ = w.Write(data)
		return forwardResult{}, nil
	}

	br := readerPool.Get().(*bufio.Reader)
	br.Reset(resp.body)
	defer func() { br.Reset(nil); readerPool.Put(br) }()
	at.phase.Store(phaseBody)
	idle.Reset(s.cfg.IdleTimeout)
	if _, err := br.Peek(1); err != nil {
		// Headers but no byte of the stream: retried if the connection
		// failed, not if the worker went quiet (it may still be working).
		return forwardResult{}, classify(err, errKindUpstreamStream, true)
	}
	h := w.Header()
	h["Content-Type"] = sseContentType
	h["Cache-Control"] = sseCacheControl
	s.setRouteHeaders(h, rt, pr.model.blockSize)
	h[canonServerTiming] = []string{pr.timing.header()}
	w.WriteHeader(resp.status)

	at.st = relayState{start: start, workerID: wk.ID, requestID: reqID, rc: http.NewResponseController(w), stall: s.cfg.ClientStallTimeout, finish: &at,
		stripUsage: stripUsage, native: pr.api != nil && pr.api.native}
	st := &at.st // in the attempt's allocation
	fl, _ := w.(http.Flusher)
	err = s.relayStream(w, fl, br, idle, st)
	if st.hasUsage {
		s.countUsage(&st.usage)
	}
	switch {
	case err == nil && st.hasUsage:
		s.agreeOn(rt, pr, &st.usage)
	case err == nil && !st.sawError:
		s.agreeOn(rt, pr, nil) // a whole stream without usage: unreported
	}
	if st.sawError {
		s.m.errors.WithLabelValues(errKindUpstreamStream).Inc()
		outcome = outcomeError
	}
	if err == nil {
		return forwardResult{ttft: st.ttft}, nil
	}
	var we *clientWriteError
	ue := classify(err, errKindUpstreamStream, false)
	if st.stalled || ue.clientGone && !st.deadline.IsZero() && !time.Now().Before(st.deadline) {
		// (A failed write also cancels the request's context, so the
		// relay may see that first, as a failed upstream read.)
		// The client stopped reading: returning cancels the upstream
		// request, so the worker stops generating for nobody.
		s.m.errors.WithLabelValues(errKindClientSlow).Inc()
		outcome = outcomeCanceled
		s.log.Warn("client stopped reading its stream; cancelled upstream", "request_id", reqID, "worker", wk.ID, "stall", s.cfg.ClientStallTimeout)
		return forwardResult{ttft: st.ttft}, nil
	}
	if errors.As(err, &we) || ue.clientGone {
		s.m.errors.WithLabelValues(errKindClientCanceled).Inc()
		outcome = outcomeCanceled
		return forwardResult{ttft: st.ttft}, nil
	}
	s.m.errors.WithLabelValues(ue.kind).Inc()
	if !st.atBoundary {
		_, _ = w.Write([]byte("\n\n")) // end the worker's half-written event
	}
	_ = openai.NewSSEWriter(w).Error(http.StatusBadGateway, openai.TypeServer, ue.Error())
	return forwardResult{ttft: st.ttft}, nil
}

func (s *Server) countUsage(u *openai.Usage) {
	if u == nil {
		return
	}
	s.m.promptToks.Add(float64(u.PromptTokens))
	if u.PromptTokensDetails != nil {
		s.m.cacheHit.Add(float64(u.PromptTokensDetails.CachedTokens))
	}
}

// idleReader re-arms the idle timer before every read.
type idleReader struct {
	r io.Reader
	t *time.Timer
	d time.Duration
}

func (ir *idleReader) Read(p []byte) (int, error) {
	ir.t.Reset(ir.d)
	return ir.r.Read(p)
}

// clientWriteError is a failed write to the client: it went away.
type clientWriteError struct{ err error }

func (e *clientWriteError) Error() string { return "frontend: write to client: " + e.err.Error() }
func (e *clientWriteError) Unwrap() error { return e.err }

// relayState is what the relay learns from the events it passes on.
type relayState struct {
	start     time.Time
	workerID  string
	requestID string
	finish    *attempt // tells InFlight the request is done; nil: nothing to tell
	// native: the stream is a Messages or Responses stream, which ends
	// with its last event rather than [DONE], and whose Responses text
	// comes in "delta" fields.
	native bool

	last       time.Time // time of the last content chunk
	ttft       time.Duration
	sawDone    bool
	sawError   bool // the worker sent an error event
	atBoundary bool // the bytes written so far end on an event boundary
	hasUsage   bool
	usage      openai.Usage
	// stripUsage: the frontend asked for the usage chunk, the client did
	// not; it is read and not relayed, with the blank line ending it
	// (skipBlank).
	stripUsage bool
	skipBlank  bool

	// rc, when set, gets a write deadline stall ahead of every write, moved
	// at most every stall/8 (a deadline per SSE line would cost more than
	// the line): a client that stops reading is cut off after 7/8·stall to
	// stall of blocked writes.
	rc       *http.ResponseController
	stall    time.Duration
	extendAt time.Time
	deadline time.Time // the write deadline in force
	stalled  bool      // a write failed at or past the deadline: the client stopped reading
}

// writeFailed wraps a failed client write, noting whether it was a stall.
func (st *relayState) writeFailed(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) || !st.deadline.IsZero() && !time.Now().Before(st.deadline) {
		st.stalled = true
	}
	return &clientWriteError{err: err}
}

// extendDeadline moves the client write deadline forward if it is due.
func (st *relayState) extendDeadline() {
	if st.rc == nil {
		return
	}
	now := time.Now()
	if now.Before(st.extendAt) {
		return
	}
	if st.rc.SetWriteDeadline(now.Add(st.stall)) != nil {
		st.rc = nil // the writer cannot take deadlines
		return
	}
	st.extendAt, st.deadline = now.Add(st.stall/8), now.Add(st.stall)
}

var (
	dataPrefix    = []byte("data:")
	donePayload   = []byte("[DONE]")
	errorPrefix   = []byte(`{"error"`)
	usageKey      = []byte(`"usage":{`)
	contentKey    = []byte(`"content":"`)
	textKey       = []byte(`"text":"`)
	deltaKey      = []byte(`"delta":"`)
	eventBoundary = []byte("\n\n")
)

// relayStream copies SSE lines from br to dst as they arrive until the
// event after [DONE] ends or the stream fails. It flushes before it would
// wait for the worker: an event is never held back, yet a burst of events
// that arrived together goes out in one write (this took
// BenchmarkRelayThroughput from 66k to about 500k tokens/s at -cpu 1).
//
// It inspects each data payload with byte searches only; the one event
// carrying a usage object is decoded. It does not allocate otherwise
// (pinned by TestRelayStreamAllocs). A line longer than br's buffer
// (64 KiB) is relayed in pieces and not inspected.
func (s *Server) relayStream(dst io.Writer, fl http.Flusher, br *bufio.Reader, idle *time.Timer, st *relayState) error {
	st.atBoundary = true
	midLine, pending := false, false
	for {
		if pending && !lineBuffered(br) {
			st.extendDeadline()
			if err := st.flush(fl); err != nil {
				return st.writeFailed(err)
			}
			pending = false
		}
		if idle != nil {
			idle.Reset(s.cfg.IdleTimeout)
		}
		line, err := br.ReadSlice('\n')
		if st.stripUsage && err == nil && !midLine {
			if st.skipBlank {
				st.skipBlank = false
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					continue
				}
			}
			if p, ok := usageChunk(line); ok {
				s.inspect(p, st)
				st.skipBlank = true
				continue
			}
		}
		if len(line) > 0 {
			st.extendDeadline()
			if _, werr := dst.Write(line); werr != nil {
				return st.writeFailed(werr)
			}
			st.atBoundary, pending = false, true
		}
		if err == bufio.ErrBufferFull {
			midLine = true
			continue
		}
		if err != nil {
			if err == io.EOF {
				if st.sawDone && len(line) == 0 {
					// [DONE] without its blank line: end the event ourselves.
					if _, werr := dst.Write(eventBoundary[:1]); werr != nil {
						return &clientWriteError{err: werr}
					}
					st.atBoundary = true
					return st.end(dst)
				}
				err = io.ErrUnexpectedEOF
			}
			flush(fl)
			return fmt.Errorf("stream ended before [DONE]: %w", err)
		}
		if midLine {
			midLine = false
			continue
		}
		payload := bytes.TrimRight(line, "\r\n")
		if len(payload) == 0 {
			st.atBoundary = true
			if st.sawDone {
				return st.end(dst)
			}
			continue
		}
		if bytes.HasPrefix(payload, dataPrefix) {
			s.inspect(bytes.TrimSpace(payload[len(dataPrefix):]), st)
		}
	}
}

// end sends the rest of a whole stream, the end of the body included,
// before the frontend's bookkeeping of it (index agreement, the in-flight
// record, metrics): when the events came in one burst nothing was flushed
// yet, and the client's first byte would otherwise wait for that work.
// The last event and the end of the body go out in one write. A writer
// that cannot end its body early (an API translation, which writes its
// own last events) is left to the handler's return.
func (st *relayState) end(dst io.Writer) error {
	e, ok := dst.(bodyEnder)
	if !ok {
		return nil
	}
	st.extendDeadline()
	if err := e.EndBody(); err != nil {
		return st.writeFailed(err)
	}
	return nil
}

// lineBuffered reports whether br holds a whole line, so the next ReadSlice
// will not wait for the network. It scans only up to the first newline.
func lineBuffered(br *bufio.Reader) bool {
	n := br.Buffered()
	if n == 0 {
		return false
	}
	b, _ := br.Peek(n) // never blocks: n bytes are buffered
	return bytes.IndexByte(b, '\n') >= 0
}

// flush flushes to the client and reports a failed write (a stalled
// client past its deadline), which http.Flusher cannot.
func (st *relayState) flush(fl http.Flusher) error {
	if st.rc != nil {
		return st.rc.Flush()
	}
	flush(fl)
	return nil
}

func flush(fl http.Flusher) {
	if fl != nil {
		fl.Flush()
	}
}

// inspect updates st from one data payload.
func (s *Server) inspect(p []byte, st *relayState) {
	switch {
	case bytes.Equal(p, donePayload) || st.native && openai.StreamEnd(p):
		st.sawDone = true
		if st.finish != nil {
			st.finish.finish() // before [DONE] reaches the client
		}
		return
	case bytes.HasPrefix(p, errorPrefix):
		st.sawError = true
		return
	}
	if st.native && nativeText(p) || !st.native && (hasText(p, contentKey) || hasText(p, textKey)) {
		now := time.Now()
		if st.ttft == 0 {
			st.ttft = max(now.Sub(st.start), time.Nanosecond)
			s.m.ttft.Observe(st.ttft.Seconds())
			if s.deps.InFlight != nil {
				s.deps.InFlight.FirstToken(st.workerID, st.requestID)
			}
		} else {
			s.m.itl.Observe(now.Sub(st.last).Seconds())
		}
		st.last = now
	}
	if bytes.Contains(p, usageKey) {
		if u, ok := openai.UsageOf(p); ok && u != nil {
			st.usage, st.hasUsage = *u, true
		}
	}
}

// nativeText reports whether a Messages or Responses stream payload is a
// text delta: their other events (content_part.done, output_text.done)
// repeat text already counted.
func nativeText(p []byte) bool {
	return hasText(p, deltaKey) || bytes.Contains(p, textDeltaType) && hasText(p, textKey)
}

var textDeltaType = []byte(`"text_delta"`)

// hasText reports whether p holds key followed by a non-empty string.
func hasText(p, key []byte) bool {
	i := bytes.Index(p, key)
	return i >= 0 && i+len(key) < len(p) && p[i+len(key)] != '"'
}

// workerAnswer is a worker's response, from the lean client (plain http
// workers) or from net/http (https workers).
type workerAnswer struct {
	status int
	body   io.ReadCloser
	lean   *upstream.Response
	std    http.Header
}

func (a *workerAnswer) header(name string) string {
	if a.lean != nil {
		return a.lean.Header(name)
	}
	return a.std.Get(name)
}

// send posts body to the worker at base+path. A plain http worker is
// reached through the lean client, which costs the hop a fraction of
// net/http's Transport; an https one through net/http. sent, if set, runs
// once the request is written (for an https worker, just before).
func (s *Server) send(ctx context.Context, base, path string, body []byte, reqID string, sent func()) (workerAnswer, error) {
	if addr, prefix, ok := plainHTTP(base); ok {
		if prefix != "" {
			path = prefix + path
		}
		hs := [3]upstream.Header{{Name: "Content-Type", Value: "application/json"}, {Name: "X-Request-Id", Value: reqID}}
		n := 2
		if s.cfg.WorkerKey != "" {
			hs[2] = upstream.Header{Name: "Authorization", Value: s.workerBearer}
			n = 3
		}
		resp, err := s.lean.Do(ctx, &upstream.Request{Addr: addr, Path: path, Headers: hs[:n], Body: body, Sent: sent})
		if err != nil {
			return workerAnswer{}, err
		}
		return workerAnswer{status: resp.StatusCode, body: resp.Body, lean: resp}, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return workerAnswer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headerRequestID, reqID)
	if sent != nil {
		sent()
	}
	resp, err := s.client.Transport.RoundTrip(req) // workerAuth adds the worker key
	if err != nil {
		return workerAnswer{}, err
	}
	return workerAnswer{status: resp.StatusCode, body: resp.Body, std: resp.Header}, nil
}

// plainHTTP splits an http:// worker URL into the address to dial and the
// path prefix; ok is false for any other URL, which net/http serves.
func plainHTTP(u string) (addr, prefix string, ok bool) {
	rest, ok := strings.CutPrefix(u, "http://")
	if !ok {
		return "", "", false
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		if rest[i] != '/' {
			return "", "", false
		}
		rest, prefix = rest[:i], strings.TrimSuffix(rest[i:], "/")
	}
	if rest == "" || strings.ContainsRune(rest, '@') {
		return "", "", false
	}
	if _, _, err := net.SplitHostPort(rest); err != nil {
		rest = net.JoinHostPort(strings.Trim(rest, "[]"), "80")
	}
	return rest, prefix, true
}
