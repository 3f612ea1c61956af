package frontend

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// workerState is what the frontend tracks per worker ID: requests in
// flight, passive outlier detection and the cancel functions of the
// requests it serves.
//
// Outlier ejection is passive: a worker is judged by the requests sent to
// it. After Config.EjectAfter consecutive connect failures, or after one
// timeout (the worker took the request and said nothing for a whole
// deadline: frozen or hopelessly behind), it is ejected: no new request is
// routed to it, and a probe (GET /health, answered with any status below
// 500 within the connect timeout) brings it back. Probes start after
// Config.EjectProbeEvery and back off to 8 times that while it stays dark.
type workerState struct {
	inflight atomic.Int64
	agree    agreement  // index agreement, under its own lock
	drift    driftState // the bridge's drop counters, under its own lock

	mu         sync.Mutex // guards the fields below
	fails      int        // consecutive connect failures; a timeout counts as EjectAfter
	ejected    bool
	ejectCause string
	ejectedAt  time.Time
	probing    bool
	reqs       map[*tracked]struct{}
	check      *healthCheck // the latest suspect check; see checkSuspect
}

// healthCheck is one GET /health of a worker that requests wait on.
type healthCheck struct {
	done chan struct{}
	err  error     // set before done is closed
	at   time.Time // when it ended; set before done is closed
}

// tracked is one request in flight on a worker, cancellable when the
// worker leaves the registry.
type tracked struct {
	st     *workerState
	cancel context.CancelFunc
	gone   atomic.Bool // cancelled because the worker left
	cause  atomic.Value
}

func (s *Server) workerState(id string) *workerState {
	if v, ok := s.inflight.Load(id); ok {
		return v.(*workerState)
	}
	v, _ := s.inflight.LoadOrStore(id, &workerState{})
	return v.(*workerState)
}

func (s *Server) inflightCounter(id string) *atomic.Int64 { return &s.workerState(id).inflight }

// track registers a request's cancel function on worker id; call the
// returned func when the request is done.
func (s *Server) track(id string, tr *tracked) {
	st := s.workerState(id)
	tr.st = st
	st.mu.Lock()
	if st.reqs == nil {
		st.reqs = make(map[*tracked]struct{})
	}
	st.reqs[tr] = struct{}{}
	st.mu.Unlock()
}

// untrack ends what track began.
func (tr *tracked) untrack() {
	tr.st.mu.Lock()
	delete(tr.st.reqs, tr)
	tr.st.mu.Unlock()
}

// CancelWorker cancels every request in flight on worker id: it has left
// the registry without deregistering (its entry expired), so whatever it
// was doing will not reach the client. A request still waiting for its
// first byte is retried on another worker; a stream already under way ends
// with an error event. It returns how many requests were cancelled.
func (s *Server) CancelWorker(id, reason string) int {
	v, ok := s.inflight.Load(id)
	if !ok {
		return 0
	}
	st := v.(*workerState)
	st.mu.Lock()
	reqs := make([]*tracked, 0, len(st.reqs))
	for tr := range st.reqs {
		reqs = append(reqs, tr)
	}
	st.mu.Unlock()
	for _, tr := range reqs {
		tr.cause.Store(reason)
		tr.gone.Store(true)
		tr.cancel()
	}
	if len(reqs) > 0 {
		s.m.cancelled.Add(float64(len(reqs)))
		s.log.Warn("worker left the registry: cancelled its requests in flight", "worker", id, "requests", len(reqs), "reason", reason)
	}
	return len(reqs)
}

// ejected reports whether worker id is ejected.
func (s *Server) ejected(id string) bool {
	v, ok := s.inflight.Load(id)
	if !ok {
		return false
	}
	st := v.(*workerState)
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ejected
}

// ejection returns whether worker id is ejected and why.
func (s *Server) ejection(id string) (bool, string) {
	v, ok := s.inflight.Load(id)
	if !ok {
		return false, ""
	}
	st := v.(*workerState)
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ejected, st.ejectCause
}

// noteSuccess: the worker answered (response headers arrived).
func (s *Server) noteSuccess(id string) {
	st := s.workerState(id)
	st.mu.Lock()
	st.fails = 0
	st.mu.Unlock()
}

// noteFailure counts a connect failure (timeout false) or a timeout, and
// ejects the worker when it reaches the threshold.
func (s *Server) noteFailure(wk Worker, timeout bool, cause error) {
	st := s.workerState(wk.ID)
	st.mu.Lock()
	if timeout {
		st.fails += s.cfg.EjectAfter
	} else {
		st.fails++
	}
	eject := !st.ejected && st.fails >= s.cfg.EjectAfter
	if eject {
		st.ejected, st.ejectedAt = true, time.Now()
		st.ejectCause = cause.Error()
	}
	probe := eject && !st.probing
	if probe {
		st.probing = true
	}
	st.mu.Unlock()
	if !eject {
		return
	}
	s.m.ejections.Inc()
	s.log.Warn("worker ejected: no new requests until it answers a health probe", "worker", wk.ID,
		"consecutive_failures", st.fails, "cause", cause)
	if probe {
		s.probeWG.Add(1)
		go s.probeBack(wk)
	}
}

// probeBack probes an ejected worker until it answers, it leaves the pool
// or the server closes.
func (s *Server) probeBack(wk Worker) {
	defer s.probeWG.Done()
	st := s.workerState(wk.ID)
	defer func() {
		st.mu.Lock()
		st.probing = false
		st.mu.Unlock()
	}()
	wait := s.cfg.EjectProbeEvery
	for {
		t := time.NewTimer(wait)
		select {
		case <-s.closing:
			t.Stop()
			return
		case <-t.C:
		}
		cur, listed := s.listed(wk.ID)
		if !listed {
			st.mu.Lock()
			st.ejected, st.fails = false, 0
			st.mu.Unlock()
			return // gone from the pool; a new registration starts afresh
		}
		err := s.alive(context.Background(), cur)
		if err == nil {
			st.mu.Lock()
			st.ejected, st.fails = false, 0
			down := time.Since(st.ejectedAt)
			st.mu.Unlock()
			s.log.Info("ejected worker answers again: back in routing", "worker", wk.ID, "ejected_for", down.Round(time.Millisecond))
			return
		}
		wait = min(2*wait, 8*s.cfg.EjectProbeEvery)
	}
}

// listed returns the worker from the current pool.
func (s *Server) listed(id string) (Worker, bool) {
	ws := s.deps.Workers.List()
	i := slices.IndexFunc(ws, func(w Worker) bool { return w.ID == id })
	if i < 0 {
		return Worker{}, false
	}
	return ws[i], true
}

// alive asks the worker's GET /health, bounded by the connect timeout. Any
// answer below 500 counts: the point is whether the process serves HTTP.
func (s *Server) alive(ctx context.Context, wk Worker) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, wk.URL+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("health probe: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		return fmt.Errorf("health probe: status %d", resp.StatusCode)
	}
	return nil
}

// checkSuspect checks the health of a worker a request has waited
// SuspectAfter on. Requests waiting at once share one check, and an answer
// younger than SuspectAfter is reused: a slow but live worker with many
// requests waiting costs one probe a second, not one per request.
func (s *Server) checkSuspect(ctx context.Context, wk Worker) error {
	st := s.workerState(wk.ID)
	st.mu.Lock()
	if c := st.check; c != nil {
		select {
		case <-c.done:
			if time.Since(c.at) < s.cfg.SuspectAfter {
				st.mu.Unlock()
				return c.err
			}
		default:
			st.mu.Unlock()
			select {
			case <-c.done:
				return c.err
			case <-ctx.Done():
				return nil // the request ended: nothing to judge
			}
		}
	}
	c := &healthCheck{done: make(chan struct{})}
	st.check = c
	st.mu.Unlock()
	// Not the request's context: the answer serves every waiter.
	pctx, cancel := context.WithTimeout(context.Background(), s.cfg.SuspectCheckTimeout)
	c.err = s.alive(pctx, wk)
	cancel()
	c.at = time.Now()
	close(c.done)
	return c.err
}

// routable drops ejected workers from ws. If every one is ejected it
// returns ws as it is: trying a doubtful worker beats refusing everyone.
func (s *Server) routable(ws []Worker) []Worker {
	out := ws[:0:0]
	for _, w := range ws {
		if !s.ejected(w.ID) {
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		return ws
	}
	return out
}

// watchdog bounds a non-streaming request's wait for response headers.
// Such a worker answers only when generation is done, so a fixed deadline
// would cut long generations; instead, every HeaderTimeout the worker's
// liveness is checked (early enough that the check ends by the deadline),
// and the request is given up on only if the worker does not answer it: a
// frozen worker costs a request at most HeaderTimeout.
type watchdog struct {
	t     *time.Timer
	state atomic.Int32 // 0 armed, 1 stopped, 2 fired
}

func (s *Server) startWatchdog(ctx context.Context, wk Worker, fire func(err error)) *watchdog {
	check := min(s.cfg.ConnectTimeout, s.cfg.HeaderTimeout/2)
	wd := &watchdog{}
	var run func()
	run = func() {
		if wd.state.Load() != 0 || ctx.Err() != nil {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, check)
		err := s.alive(pctx, wk)
		cancel()
		if err == nil {
			wd.t.Reset(s.cfg.HeaderTimeout)
			return
		}
		if wd.state.CompareAndSwap(0, 2) {
			fire(err)
		}
	}
	wd.t = time.AfterFunc(s.cfg.HeaderTimeout-check, run)
	return wd
}

// stop disarms the watchdog; false means it fired.
func (wd *watchdog) stop() bool {
	wd.t.Stop()
	return wd.state.CompareAndSwap(0, 1) || wd.state.Load() == 1
}
