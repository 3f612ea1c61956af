package gate

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Link names a prefill→decode worker pair.
type Link struct {
	From string // prefill worker P
	To   string // decode worker D
}

type linkState struct {
	bps      float64 // bytes per second; valid when measured
	rtt      time.Duration
	measured bool
	probing  time.Time // when a probe started; zero when none is running
	samples  int
}

// LinkEstimator keeps a throughput estimate per link: seeded by a probe,
// then an exponentially weighted moving average over real transfers. Safe
// for concurrent use.
type LinkEstimator struct {
	alpha        float64
	probeTimeout time.Duration
	now          func() time.Time
	gauge        *prometheus.GaugeVec

	mu    sync.RWMutex // guards links and busy
	links map[Link]*linkState
	// busy is, per prefill worker, when the KV bytes the gate has already
	// sent remote from it finish crossing its link, drained at the measured
	// rate (the package comment's link backlog).
	busy map[string]time.Time
}

func newLinkEstimator(alpha float64, probeTimeout time.Duration, now func() time.Time, gauge *prometheus.GaugeVec) *LinkEstimator {
	return &LinkEstimator{alpha: alpha, probeTimeout: probeTimeout, now: now, gauge: gauge, links: make(map[Link]*linkState), busy: make(map[string]time.Time)}
}

func (e *LinkEstimator) state(l Link) *linkState {
	s, ok := e.links[l]
	if !ok {
		s = &linkState{}
		e.links[l] = s
	}
	return s
}

// update folds one throughput sample into the estimate. Caller holds mu.
func (e *LinkEstimator) update(l Link, s *linkState, bps float64) {
	if !s.measured {
		s.bps = bps
		s.measured = true
	} else {
		s.bps = e.alpha*bps + (1-e.alpha)*s.bps
	}
	s.samples++
	e.gauge.WithLabelValues(l.From, l.To).Set(s.bps)
}

// Observe records a real transfer of bytes from→to that took d (request to
// last byte). Zero-byte or zero-time transfers carry no information and
// are ignored.
func (e *LinkEstimator) Observe(from, to string, bytes int64, d time.Duration) {
	if bytes <= 0 || d <= 0 {
		return
	}
	l := Link{from, to}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.update(l, e.state(l), float64(bytes)/d.Seconds())
}

// ObserveProbe records a probe's result and ends the probe. A probe is a
// deliberate measurement of the link as it is now, so it replaces the
// estimate instead of being averaged in: an operator who re-probes after a
// network change (or after a probe that ran while the link was shared)
// must see the new figure, not a blend with the old one.
func (e *LinkEstimator) ObserveProbe(from, to string, bytesPerSec float64, rtt time.Duration) {
	l := Link{from, to}
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.state(l)
	s.probing = time.Time{}
	if bytesPerSec <= 0 {
		return
	}
	s.rtt = rtt
	s.measured = false // restart the estimate from this sample
	e.update(l, s, bytesPerSec)
}

// ProbeFailed ends a probe without a result; the pair needs a probe again.
func (e *LinkEstimator) ProbeFailed(from, to string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.state(Link{from, to}).probing = time.Time{}
}

// Estimate returns the link's throughput and round-trip time; ok is false
// while the link is unmeasured.
func (e *LinkEstimator) Estimate(from, to string) (bytesPerSec float64, rtt time.Duration, ok bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	s, found := e.links[Link{from, to}]
	if !found || !s.measured {
		return 0, 0, false
	}
	return s.bps, s.rtt, true
}

// Backlog returns how long the bytes already committed to the prefill
// worker's outbound link (by remote decisions of this gate) still need to
// drain at the measured rate; 0 when the link is idle.
func (e *LinkEstimator) Backlog(from string) time.Duration {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.backlogLocked(from)
}

func (e *LinkEstimator) backlogLocked(from string) time.Duration {
	return max(0, e.busy[from].Sub(e.now()))
}

// commitLocked queues bytes on from's outbound link behind its backlog.
// Caller holds mu for writing.
func (e *LinkEstimator) commitLocked(from string, transfer time.Duration) {
	now := e.now()
	start := e.busy[from]
	if start.Before(now) {
		start = now
	}
	e.busy[from] = start.Add(transfer)
}

// NeedsProbe reports whether the link is unmeasured and no probe of it is
// running (a probe that has run longer than the probe timeout counts as
// lost).
func (e *LinkEstimator) NeedsProbe(from, to string) bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	s, found := e.links[Link{from, to}]
	if !found {
		return true
	}
	return !s.measured && !e.probeRunning(s)
}

func (e *LinkEstimator) probeRunning(s *linkState) bool {
	return !s.probing.IsZero() && e.now().Sub(s.probing) < e.probeTimeout
}

// MarkProbing claims the link's probe. It returns false when a probe is
// already running, so of several callers exactly one probes.
func (e *LinkEstimator) MarkProbing(from, to string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.state(Link{from, to})
	if e.probeRunning(s) {
		return false
	}
	s.probing = e.now()
	return true
}

// LinkEstimate is one row of Snapshot.
type LinkEstimate struct {
	Link
	BytesPerSec float64
	RTT         time.Duration
	Measured    bool
	Samples     int
}

// Forget drops every link from or to worker (it left the deployment), and
// its throughput gauge series.
func (e *LinkEstimator) Forget(worker string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.busy, worker)
	for l := range e.links {
		if l.From == worker || l.To == worker {
			delete(e.links, l)
			if e.gauge != nil {
				e.gauge.DeleteLabelValues(l.From, l.To)
			}
		}
	}
}

// Snapshot lists every known link, for preflight and debugging.
func (e *LinkEstimator) Snapshot() []LinkEstimate {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]LinkEstimate, 0, len(e.links))
	for l, s := range e.links {
		out = append(out, LinkEstimate{Link: l, BytesPerSec: s.bps, RTT: s.rtt, Measured: s.measured, Samples: s.samples})
	}
	return out
}
