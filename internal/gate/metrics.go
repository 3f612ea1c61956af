package gate

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are all of the package's metrics.
type metrics struct {
	decisions *prometheus.CounterVec
	ttftError *prometheus.HistogramVec
	linkBPS   *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_disagg_decisions_total",
			Help: "Disaggregation decisions, by gate mode, choice (local|remote) and reason.",
		}, []string{"mode", "choice", "reason"}),
		ttftError: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "switchyard_disagg_ttft_prediction_error_seconds",
			Help: "Measured minus predicted time to first token, by choice; positive means the gate was optimistic.",
			// Symmetric: the sign says which way the model errs.
			Buckets: []float64{-10, -5, -2, -1, -0.5, -0.25, -0.1, -0.05, -0.025, -0.01, 0,
				0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10},
		}, []string{"choice"}),
		linkBPS: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_link_throughput_bytes_per_second",
			Help: "Estimated KV transfer throughput from prefill worker to decode worker (probe, then EWMA of transfers).",
		}, []string{"from", "to"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.decisions, m.ttftError, m.linkBPS} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("gate: register metrics: %w", err)
			}
		}
	}
	return m, nil
}
