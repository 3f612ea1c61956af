package kvevents

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric descriptions, all in one place. Values are read from the
// consumer's state at scrape time, so a forgotten worker's series vanish.
var (
	descHealth = prometheus.NewDesc("switchyard_kv_event_health",
		"KV event health per worker: 1 for the current state, 0 for the others.", []string{"worker", "state"}, nil)
	descAge = prometheus.NewDesc("switchyard_kv_event_age_seconds",
		"Seconds since the worker's last KV event batch or heartbeat.", []string{"worker"}, nil)
	descBatches = prometheus.NewDesc("switchyard_kv_event_batches_total",
		"KV event batches applied to the index, heartbeats included.", []string{"worker"}, nil)
	descBlocks = prometheus.NewDesc("switchyard_kv_event_blocks_total",
		"Block hashes in applied KV events.", []string{"worker"}, nil)
	descGaps = prometheus.NewDesc("switchyard_kv_event_gaps_total",
		"Sequence gaps detected in a worker's KV events.", []string{"worker"}, nil)
	descResyncs = prometheus.NewDesc("switchyard_kv_event_resyncs_total",
		"Snapshots installed to resynchronise a worker.", []string{"worker"}, nil)
	descTierBlocks = prometheus.NewDesc("switchyard_kv_event_tier_blocks_total",
		"Block hashes in applied Stored and Removed events, by medium.", []string{"worker", "medium"}, nil)
	descUnknownMedia = prometheus.NewDesc("switchyard_kv_event_unknown_medium_total",
		"KV events whose medium was unknown; their blocks were indexed as the slowest tier.", []string{"worker"}, nil)
	descMalformed = prometheus.NewDesc("switchyard_kv_event_malformed_total",
		"KV event messages rejected as malformed.", nil, nil)
)

// metrics is the consumer's prometheus.Collector.
type metrics struct{ c *Consumer }

func (m metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHealth, descAge, descBatches, descBlocks, descGaps, descResyncs, descTierBlocks, descUnknownMedia, descMalformed} {
		ch <- d
	}
}

func (m metrics) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, w := range m.c.snapshotWorkers() {
		w.mu.Lock()
		h := w.healthLocked(now)
		w.mu.Unlock()
		for _, s := range states {
			v := 0.0
			if h.State == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descHealth, prometheus.GaugeValue, v, w.id, s.String())
		}
		ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, h.LastEventAge.Seconds(), w.id)
		ch <- prometheus.MustNewConstMetric(descBatches, prometheus.CounterValue, float64(h.Batches), w.id)
		ch <- prometheus.MustNewConstMetric(descBlocks, prometheus.CounterValue, float64(h.Blocks), w.id)
		ch <- prometheus.MustNewConstMetric(descGaps, prometheus.CounterValue, float64(h.Gaps), w.id)
		ch <- prometheus.MustNewConstMetric(descResyncs, prometheus.CounterValue, float64(h.Resyncs), w.id)
		for t, n := range h.TierBlocks {
			ch <- prometheus.MustNewConstMetric(descTierBlocks, prometheus.CounterValue, float64(n), w.id, Tier(t).String())
		}
		ch <- prometheus.MustNewConstMetric(descUnknownMedia, prometheus.CounterValue, float64(h.UnknownMedia), w.id)
	}
	ch <- prometheus.MustNewConstMetric(descMalformed, prometheus.CounterValue, float64(m.c.malformed.Load()))
}
