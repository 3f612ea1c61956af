package admit

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/prom"
)

// metrics are the admission series. A nil *metrics records nothing.
type metrics struct {
	depthG     *prometheus.GaugeVec // priority
	depthBy    []prometheus.Gauge   // depthG's children, in Priorities' order
	waitH      prometheus.Histogram
	admissions *prometheus.CounterVec // tenant, priority, outcome
}

func newMetrics(reg prometheus.Registerer, c *Controller) (*metrics, error) {
	m := &metrics{
		depthG: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchyard_queue_depth",
			Help: "Requests waiting in the admission queue, by priority."}, []string{"priority"}),
		// From an instant admission to --queue-timeout (30 s by default).
		waitH: prom.Histogram("switchyard_queue_wait_seconds",
			"Time admitted requests waited in the admission queue (0 when admitted at once), and the wait of those that timed out or left.",
			[]float64{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}),
		admissions: prom.CounterVec("switchyard_admissions_total",
			"Admission decisions by tenant, priority and outcome: admitted (at once), queued (admitted after a wait), shed, max_queue, queue_timeout, requests_per_minute, tokens_per_minute, no_capacity, canceled.",
			"tenant", "priority", "outcome"),
	}
	for _, p := range Priorities() {
		m.depthBy = append(m.depthBy, m.depthG.WithLabelValues(p.String()))
	}
	if err := prom.Register(reg, "admit", m.depthG, m.waitH, m.admissions); err != nil {
		return nil, err
	}
	return m, nil
}

// depth publishes the queue's depth; c.mu is held.
func (m *metrics) depth(c *Controller) {
	if m == nil {
		return
	}
	for i, p := range Priorities() {
		m.depthBy[i].Set(float64(c.q.lenAt(p)))
	}
}

func (m *metrics) wait(d time.Duration) {
	if m != nil {
		m.waitH.Observe(d.Seconds())
	}
}

func (m *metrics) admission(tenant string, p Priority, outcome string) {
	if m != nil {
		m.admissions.WithLabelValues(tenant, p.String(), outcome).Inc()
	}
}
