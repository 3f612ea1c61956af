package admit

import "time"

// rateMeter counts releases over the last window seconds, to estimate the
// queue's drain rate. Not safe for concurrent use (Controller.mu).
type rateMeter struct {
	counts [window]int
	secs   [window]int64 // the unix second each count is for
	first  int64         // the first second anything was counted
}

// window is how far back the drain rate looks: long enough to smooth a
// burst of completions, short enough to follow a fleet that shrank.
const window = 10

func (m *rateMeter) add(now time.Time) {
	s := now.Unix()
	i := s % window
	if m.secs[i] != s {
		m.secs[i], m.counts[i] = s, 0
	}
	m.counts[i]++
	if m.first == 0 {
		m.first = s
	}
}

// rate is releases per second over the window (or since the first).
func (m *rateMeter) rate(now time.Time) float64 {
	if m.first == 0 {
		return 0
	}
	s := now.Unix()
	n := 0
	for i := range m.counts {
		if s-m.secs[i] < window {
			n += m.counts[i]
		}
	}
	span := min(window, s-m.first+1)
	return float64(n) / float64(span)
}

// Stats is the controller's state, for /health and the dashboard.
type Stats struct {
	// Queued is the queue's depth by priority name.
	Queued map[string]int `json:"queued"`
	// InUse are the requests admitted and not yet released; Capacity the
	// slots they may fill (-1: no bound).
	InUse    int `json:"in_use"`
	Capacity int `json:"capacity"`
	// DrainPerSec is the release rate Retry-After is worked out from.
	DrainPerSec float64 `json:"drain_per_s"`
	// Outcomes counts decisions since start, by outcome (admitted, queued,
	// shed, max_queue, queue_timeout, requests_per_minute, ...).
	Outcomes map[string]uint64 `json:"outcomes"`
}

// Stats returns a snapshot.
func (c *Controller) Stats() Stats {
	now := time.Now()
	c.mu.Lock()
	st := Stats{Queued: map[string]int{}, InUse: c.inUse, Capacity: c.cfg.Capacity(), DrainPerSec: c.drain.rate(now)}
	for _, p := range Priorities() {
		st.Queued[p.String()] = c.q.lenAt(p)
	}
	c.mu.Unlock()
	c.countMu.Lock()
	st.Outcomes = make(map[string]uint64, len(c.counts))
	for k, v := range c.counts {
		st.Outcomes[k] = v
	}
	c.countMu.Unlock()
	return st
}
