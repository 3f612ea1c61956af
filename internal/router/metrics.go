package router

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Decision outcomes, the outcome label of switchyard_router_decisions_total.
const (
	OutcomeHit       = "hit"        // the index credits the chosen worker with overlap
	OutcomeApproxHit = "approx_hit" // only the approximate index does
	OutcomeMiss      = "miss"       // no overlap on the chosen worker
)

type metrics struct {
	decisions *prometheus.CounterVec
	overlap   prometheus.Histogram
	// byPolicy holds the decision counters resolved once, so observing a
	// decision allocates nothing.
	byPolicy map[string]*[3]prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_router_decisions_total",
			Help: "Routing decisions by policy and outcome (hit, approx_hit, miss).",
		}, []string{"policy", "outcome"}),
		overlap: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "switchyard_router_overlap_ratio",
			Help:    "Fraction of the prompt's full blocks cached on the chosen worker, per decision with at least one block.",
			Buckets: []float64{0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1},
		}),
		byPolicy: map[string]*[3]prometheus.Counter{},
	}
	for _, p := range []string{PolicyKV, PolicyRoundRobin, PolicyRandom, PolicyLeastLoaded} {
		m.byPolicy[p] = &[3]prometheus.Counter{
			m.decisions.WithLabelValues(p, OutcomeHit),
			m.decisions.WithLabelValues(p, OutcomeApproxHit),
			m.decisions.WithLabelValues(p, OutcomeMiss),
		}
	}
	return m
}

func (m *metrics) observe(d Decision, blocks int) {
	c := m.byPolicy[d.Policy]
	if c == nil {
		return
	}
	switch {
	case d.OverlapBlocks == 0:
		c[2].Inc()
	case d.Approx:
		c[1].Inc()
	default:
		c[0].Inc()
	}
	if blocks > 0 {
		m.overlap.Observe(float64(d.OverlapBlocks) / float64(blocks))
	}
}

// Register registers the router's metrics with reg.
func (r *Router) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{r.m.decisions, r.m.overlap} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("router: register metrics: %w", err)
		}
	}
	return nil
}
