package replica

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-llm/switchyard/internal/prom"
)

type metrics struct {
	peers    prometheus.GaugeFunc
	messages *prometheus.CounterVec // direction
	bytes    *prometheus.CounterVec // direction
	dropped  *prometheus.CounterVec // what
	expired  prometheus.Counter
}

func newMetrics(s *Sharer) *metrics {
	return &metrics{
		peers: prom.GaugeFunc("switchyard_replica_peers",
			"Other frontend replicas this one hears from and shares routing state with.",
			func() float64 {
				s.pmu.Lock()
				defer s.pmu.Unlock()
				return float64(len(s.peers))
			}),
		messages: prom.CounterVec("switchyard_replica_messages_total",
			"Routing-state messages between frontend replicas, by direction (sent, received).", "direction"),
		bytes: prom.CounterVec("switchyard_replica_bytes_total",
			"Bytes of routing-state messages between frontend replicas, by direction (sent, received).", "direction"),
		dropped: prom.CounterVec("switchyard_replica_dropped_total",
			"Routing state not shared or not applied, by what: approx (over the per-flush bound), publish (bus error), malformed, duplicate_id, foreign (put on the subject by the server, not a frontend).", "what"),
		expired: prom.Counter("switchyard_replica_expired_total",
			"Frontend replicas that went silent and whose share of the load was dropped."),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	if err := prom.Register(r, "replica", m.peers, m.messages, m.bytes, m.dropped, m.expired); err != nil {
		return err
	}
	for _, d := range []string{"sent", "received"} {
		m.messages.WithLabelValues(d)
		m.bytes.WithLabelValues(d)
	}
	for _, w := range []string{"approx", "publish", "malformed", "duplicate_id", "foreign"} {
		m.dropped.WithLabelValues(w) // a series from the start, so dashboards find it
	}
	return nil
}
