package bridge

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metric descriptions, all in one place; values are read from the bridge at
// scrape time.
var (
	descBatches = prometheus.NewDesc("switchyard_bridge_engine_batches_total",
		"Engine KV event batches applied.", nil, nil)
	descMalformed = prometheus.NewDesc("switchyard_bridge_engine_malformed_total",
		"Engine messages rejected as malformed (bad frames or msgpack).", nil, nil)
	descGaps = prometheus.NewDesc("switchyard_bridge_engine_gaps_total",
		"Engine sequence gaps seen.", nil, nil)
	descRestarts = prometheus.NewDesc("switchyard_bridge_engine_restarts_total",
		"Engine restarts seen (sequence numbers going back).", nil, nil)
	descReplays = prometheus.NewDesc("switchyard_bridge_engine_replays_total",
		"Replay requests to the engine, by result: covered, short (the buffer no longer held the gap), failed.", []string{"result"}, nil)
	descRebuilds = prometheus.NewDesc("switchyard_bridge_rebuilds_total",
		"Times the mirror was cleared because engine events were lost for good.", nil, nil)
	descBlocks = prometheus.NewDesc("switchyard_bridge_mirror_blocks",
		"Engine blocks in the bridge's mirror.", nil, nil)
	descEvents = prometheus.NewDesc("switchyard_bridge_engine_events_total",
		"Engine events by what the bridge did with them.", []string{"outcome"}, nil)
	descEngineUp = prometheus.NewDesc("switchyard_bridge_engine_up",
		"1 when the engine's /health answered 200 at the last probe.", nil, nil)
	descSeq = prometheus.NewDesc("switchyard_bridge_engine_last_seq",
		"Sequence number of the last engine batch applied.", nil, nil)
)

type metrics struct{ b *Bridge }

func (m metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBatches, descMalformed, descGaps, descRestarts, descReplays, descRebuilds, descBlocks, descEvents, descEngineUp, descSeq} {
		ch <- d
	}
}

func (m metrics) Collect(ch chan<- prometheus.Metric) {
	s := m.b.Status()
	c := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	c(descBatches, s.Batches)
	c(descMalformed, s.Malformed)
	c(descGaps, s.Gaps)
	c(descRestarts, s.Restarts)
	c(descReplays, s.ReplaysCovered, "covered")
	c(descReplays, s.ReplaysShort, "short")
	c(descReplays, s.ReplaysFailed, "failed")
	c(descRebuilds, s.Rebuilds)
	ch <- prometheus.MustNewConstMetric(descBlocks, prometheus.GaugeValue, float64(s.MirrorBlocks))
	ms := s.Mirror
	c(descEvents, ms.Events, "applied")
	c(descEvents, ms.Skipped, "skipped_group")
	c(descEvents, ms.UnknownKind, "unknown_type")
	c(descEvents, ms.Orphans, "orphan_parent")
	c(descEvents, ms.BadEvents, "inconsistent")
	c(descEvents, ms.UnknownMedium, "unknown_medium")
	c(descEvents, ms.UnknownRemoved, "removed_unknown_block")
	up := 0.0
	if s.EngineUp {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(descEngineUp, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(descSeq, prometheus.GaugeValue, float64(s.LastSeq))
}
