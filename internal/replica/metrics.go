package replica

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
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
		peers: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "switchyard_replica_peers",
			Help: "Other frontend replicas this one hears from and shares routing state with.",
		}, func() float64 {
			s.pmu.Lock()
			defer s.pmu.Unlock()
			return float64(len(s.peers))
		}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_replica_messages_total",
			Help: "Routing-state messages between frontend replicas, by direction (sent, received).",
		}, []string{"direction"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_replica_bytes_total",
			Help: "Bytes of routing-state messages between frontend replicas, by direction (sent, received).",
		}, []string{"direction"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_replica_dropped_total",
			Help: "Routing state not shared or not applied, by what: approx (over the per-flush bound), publish (bus error), malformed, duplicate_id.",
		}, []string{"what"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_replica_expired_total",
			Help: "Frontend replicas that went silent and whose share of the load was dropped.",
		}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.peers, m.messages, m.bytes, m.dropped, m.expired} {
		if err := r.Register(c); err != nil {
			return fmt.Errorf("replica: register metrics: %w", err)
		}
	}
	for _, d := range []string{"sent", "received"} {
		m.messages.WithLabelValues(d)
		m.bytes.WithLabelValues(d)
	}
	for _, w := range []string{"approx", "publish", "malformed", "duplicate_id"} {
		m.dropped.WithLabelValues(w) // a series from the start, so dashboards find it
	}
	return nil
}
