package gate

import (
	"slices"
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
	// base is the estimate before the transfers still in the estimator's
	// recent list (a probe, or older transfers folded in); valid when
	// hasBase. Transfers numbered since or lower came before the last
	// probe and no longer count towards this link's estimate.
	base    float64
	hasBase bool
	since   uint64
}

// transfer is one observed KV transfer out of a prefill worker.
type transfer struct {
	to         string
	start, end time.Time
	bytes      int64
	seq        uint64
	share      float64 // seconds of the link's whole rate it took; set by shares
	folded     bool    // in its link's base already; kept only for the overlap
}

// A transfer counts in its link's estimate while it is one of its prefill
// worker's maxRecent newest (at alpha 0.3 the 32nd newest weighs 0.7³¹ ≈
// 2e-5), and is then folded into the base at its share as it stands. The
// estimator keeps maxRecent older ones besides, so that a transfer's share
// still sees the ones it overlapped when it is folded: without them every
// folded transfer lost its overlap with older ones and the estimate of a
// busy 25 Gbit/s link sat 4% low.
const maxRecent = 32

// LinkEstimator keeps a throughput estimate per link: seeded by a probe,
// then an exponentially weighted moving average over real transfers, each
// corrected for the transfers it shared the prefill worker's link with.
// Safe for concurrent use.
type LinkEstimator struct {
	alpha        float64
	probeTimeout time.Duration
	now          func() time.Time
	gauge        *prometheus.GaugeVec

	mu    sync.RWMutex // guards links, busy, recent and seq
	links map[Link]*linkState
	// busy is, per prefill worker, when the KV bytes the gate has already
	// sent remote from it finish crossing its link, drained at the measured
	// rate (the package comment's link backlog).
	busy map[string]time.Time
	// recent is, per prefill worker, its last 2·maxRecent observed
	// transfers to any decode worker, oldest first.
	recent map[string][]transfer
	seq    uint64 // numbers transfers
}

func newLinkEstimator(alpha float64, probeTimeout time.Duration, now func() time.Time, gauge *prometheus.GaugeVec) *LinkEstimator {
	return &LinkEstimator{alpha: alpha, probeTimeout: probeTimeout, now: now, gauge: gauge, links: make(map[Link]*linkState),
		busy: make(map[string]time.Time), recent: make(map[string][]transfer)}
}

func (e *LinkEstimator) state(l Link) *linkState {
	s, ok := e.links[l]
	if !ok {
		s = &linkState{}
		e.links[l] = s
	}
	return s
}

// fold averages one throughput sample into a link's base. Caller holds mu.
func (e *LinkEstimator) fold(s *linkState, bps float64) {
	if !s.hasBase {
		s.base, s.hasBase = bps, true
		return
	}
	s.base = e.alpha*bps + (1-e.alpha)*s.base
}

// Observe records a real transfer of bytes from→to that took d (request to
// last byte, the link's RTT included), ending now. Zero-byte or zero-time transfers carry no
// information and are ignored.
//
// Transfers out of one prefill worker share its link, so a transfer that
// overlapped others measured only its share of the link's rate; counted at
// face value, the estimate sank below the line rate, and the gate's link
// backlog, which already queues each transfer behind the others, counted
// the sharing a second time (llama-3.1-70b at 25 Gbit/s: TTFT p99 19.1 →
// 27.9 s). So each transfer's rate is its bytes over its share of the
// link's time: over every stretch of its life, the stretch's length
// divided by the number of the worker's transfers then in flight. A
// transfer still in flight is known only once it ends, so the shares of
// the recent transfers are recomputed at every Observe and the estimate
// is the moving average over them as they now stand: over a stretch of
// overlapping transfers it comes to their bytes over the time the link
// was busy. This assumes the link, not each flow's window or CPU, limits
// the transfers.
func (e *LinkEstimator) Observe(from, to string, bytes int64, d time.Duration) {
	if bytes <= 0 || d <= 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	e.seq++
	st := e.state(Link{from, to})
	st.samples++
	// The gate prices a transfer as the RTT plus its bytes at the estimate,
	// so the estimate is learnt from the time the bytes took: a 5 MB
	// transfer on 25 Gbit/s with 0.2 ms RTT otherwise reads 10% slow.
	if st.rtt < d {
		d -= st.rtt
	}
	r := append(e.recent[from], transfer{to: to, start: now.Add(-d), end: now, bytes: bytes, seq: e.seq})
	if len(r) > 2*maxRecent {
		r = append(r[:0], r[1:]...) // folded long ago
	}
	e.recent[from] = r
	shares(r)
	if i := len(r) - 1 - maxRecent; i >= 0 && !r[i].folded {
		r[i].folded = true
		if s, ok := e.links[Link{from, r[i].to}]; ok && r[i].seq > s.since {
			e.fold(s, r[i].rate())
		}
	}
	// Every link of this worker with a transfer in r may have a new share.
	for i := range r {
		if seen := slices.ContainsFunc(r[:i], func(t transfer) bool { return t.to == r[i].to }); !seen {
			e.refresh(Link{from, r[i].to}, r)
		}
	}
}

func (t *transfer) rate() float64 { return float64(t.bytes) / t.share }

// refresh recomputes link l's estimate from its base and its transfers in
// r (shares set). Caller holds mu.
func (e *LinkEstimator) refresh(l Link, r []transfer) {
	s, ok := e.links[l]
	if !ok {
		return // forgotten
	}
	v, has := s.base, s.hasBase
	for i := range r {
		t := &r[i]
		if t.to != l.To || t.folded || t.seq <= s.since {
			continue
		}
		if !has {
			v, has = t.rate(), true
		} else {
			v = e.alpha*t.rate() + (1-e.alpha)*v
		}
	}
	if !has {
		return
	}
	s.bps, s.measured = v, true
	e.gauge.WithLabelValues(l.From, l.To).Set(v)
}

// shares sets each transfer's share of the link: the integral over its
// life of 1/(transfers in flight). O(len(r)²), with len(r) ≤ 2·maxRecent.
func shares(r []transfer) {
	var edges [4 * maxRecent]time.Time
	ts := edges[:0]
	for i := range r {
		r[i].share = 0
		ts = append(ts, r[i].start, r[i].end)
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	for k := 1; k < len(ts); k++ {
		a, b := ts[k-1], ts[k]
		if !a.Before(b) {
			continue
		}
		n := 0
		for i := range r {
			if !r[i].start.After(a) && !r[i].end.Before(b) {
				n++
			}
		}
		if n == 0 {
			continue
		}
		seg := b.Sub(a).Seconds() / float64(n)
		for i := range r {
			if !r[i].start.After(a) && !r[i].end.Before(b) {
				r[i].share += seg
			}
		}
	}
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
	// Restart the estimate from this sample: the link's transfers so far
	// no longer count towards it (they still count as sharing the link).
	s.base, s.hasBase, s.since = bytesPerSec, true, e.seq
	s.samples++
	e.refresh(l, e.recent[from])
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
	delete(e.recent, worker)
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
