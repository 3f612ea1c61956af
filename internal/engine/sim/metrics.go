package sim

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
)

// metrics are one worker's Prometheus series, on its own registry so many
// workers can share a process. vLLM's names are kept so routers and
// dashboards built for vLLM read them unchanged (counters carry the
// _total suffix that vLLM's Python client adds on exposition); latencies are in
// simulated seconds.
type metrics struct {
	reg           *prometheus.Registry
	prefixQueries prometheus.Counter
	prefixHits    prometheus.Counter
	ttftHist      prometheus.Observer
	itlHist       prometheus.Observer
	lagHist       prometheus.Observer
	preemptions   prometheus.Counter
	finishedReqs  prometheus.Counter
	abortedReqs   prometheus.Counter
	pullFailures  prometheus.Counter
	pulledBlocks  prometheus.Counter
	// Lower tiers. vLLM counts hits of its KV connector (offloading, LMCache)
	// as external prefix cache hits; the per-tier split is Switchyard's.
	extQueries prometheus.Counter
	extHits    prometheus.Counter
	tierHits   *prometheus.CounterVec
	tierLoaded *prometheus.CounterVec
}

func newMetrics(e *Engine) *metrics {
	labels := prometheus.Labels{"model_name": e.cfg.Model, "engine": e.cfg.ID}
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &metrics{reg: reg}
	gauge := func(name, help string, fn func(Load) float64) {
		f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return fn(e.Load()) }))
	}
	// As prometheus_client exports it for vLLM and SGLang: a bridge
	// tells an engine restart by it.
	started := float64(e.startWall.UnixNano()) / 1e9
	f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "process_start_time_seconds", Help: "Start time of the process since unix epoch in seconds."},
		func() float64 { return started }))
	gauge("vllm:num_requests_running", "Requests in the running batch.", func(l Load) float64 { return float64(l.Running) })
	gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.", func(l Load) float64 { return float64(l.Waiting) })
	gauge("vllm:kv_cache_usage_perc", "Fraction of KV blocks in use (0-1).", func(l Load) float64 { return l.KVUsage })
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
		f(c)
		return c
	}
	m.prefixQueries = counter("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.")
	m.prefixHits = counter("vllm:prefix_cache_hits_total", "Prompt tokens found in the GPU prefix cache.")
	m.extQueries = counter("vllm:external_prefix_cache_queries_total", "Prompt tokens looked up in the lower KV tiers (those the GPU cache missed).")
	m.extHits = counter("vllm:external_prefix_cache_hits_total", "Prompt tokens found in the lower KV tiers and loaded.")
	m.tierHits = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_worker_kv_tier_hit_tokens_total",
		Help: "Prompt tokens served from the cache, by the tier they were in.", ConstLabels: labels}, []string{"tier"})
	f(m.tierHits)
	m.tierLoaded = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_worker_kv_tier_loaded_bytes_total",
		Help: "KV bytes loaded into GPU memory from a lower tier.", ConstLabels: labels}, []string{"tier"})
	f(m.tierLoaded)
	for t := range kvevents.NumTiers {
		tier := kvevents.Tier(t).String()
		m.tierHits.WithLabelValues(tier)
		if t > 0 && t-1 < len(e.bm.lower) {
			m.tierLoaded.WithLabelValues(tier)
		}
	}
	if len(e.bm.lower) > 0 {
		gauge("vllm:cpu_cache_usage_perc", "Fraction of the host-memory KV tier in use (0-1).", func(l Load) float64 {
			return float64(l.TierBlocks[kvevents.TierCPU]) / float64(max(l.TierCapacity[kvevents.TierCPU], 1))
		})
		blocks := prometheus.NewDesc("switchyard_worker_kv_tier_blocks", "KV blocks held per tier.", []string{"tier"}, labels)
		capacity := prometheus.NewDesc("switchyard_worker_kv_tier_capacity_blocks", "KV block capacity per tier.", []string{"tier"}, labels)
		offloaded := prometheus.NewDesc("switchyard_worker_kv_offloaded_blocks_total", "Blocks written into a lower tier on eviction from the one above.", []string{"tier"}, labels)
		f(tierCollector{e: e, blocks: blocks, capacity: capacity, offloaded: offloaded})
	}
	m.preemptions = counter("vllm:num_preemptions_total", "Sequences preempted for recompute.")
	m.finishedReqs = counter("switchyard_worker_requests_finished_total", "Requests that finished generating.")
	m.abortedReqs = counter("switchyard_worker_requests_aborted_total", "Requests aborted before finishing (client gone).")
	m.pullFailures = counter("switchyard_worker_kv_pull_failures_total", "Remote prefills that failed to load; the worker recomputed them.")
	m.pulledBlocks = counter("switchyard_worker_kv_pulled_blocks_total", "KV blocks received from prefill workers and inserted.")
	hist := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: labels, Buckets: buckets})
		f(h)
		return h
	}
	// vLLM's bucket bounds.
	m.ttftHist = hist("vllm:time_to_first_token_seconds", "Simulated time to first token.",
		[]float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560})
	m.itlHist = hist("vllm:inter_token_latency_seconds", "Simulated time between output tokens.",
		[]float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80})
	// Pacing: how far behind its simulated schedule the engine delivered
	// each step, in wall seconds. A host that cannot keep up with
	// --speedup (busy cores, too many workers per core) shows here; the
	// engine then runs its steps back to back until it has caught up, so
	// the simulated timeline survives, but its tokens reach clients late.
	m.lagHist = hist("switchyard_worker_pacing_lag_seconds", "Wall time each step's tokens were delivered after the simulated schedule said (0: on time).",
		[]float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5})
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "vllm:cache_config_info", Help: "KV cache configuration.",
		ConstLabels: prometheus.Labels{"model_name": e.cfg.Model, "engine": e.cfg.ID,
			"block_size": strconv.Itoa(e.bs), "num_gpu_blocks": strconv.Itoa(e.bm.total()),
			"prefix_caching_hash_algo": "kvindex-chain64", "enable_prefix_caching": "True"}})
	info.Set(1)
	f(info)
	return m
}

// The recording methods do nothing on a nil *metrics: a virtual-time Core
// exports none.

func (m *metrics) prefixLookup(queried int, hit [kvevents.NumTiers]int) {
	if m == nil {
		return
	}
	gpu, lower := hit[kvevents.TierGPU], hit[kvevents.TierCPU]+hit[kvevents.TierDisk]
	m.prefixQueries.Add(float64(queried))
	m.prefixHits.Add(float64(gpu))
	m.extQueries.Add(float64(queried - gpu))
	m.extHits.Add(float64(lower))
	for t, n := range hit {
		if n > 0 {
			m.tierHits.WithLabelValues(kvevents.Tier(t).String()).Add(float64(n))
		}
	}
}

func (m *metrics) loaded(t kvevents.Tier, bytes int) {
	if m != nil && bytes > 0 {
		m.tierLoaded.WithLabelValues(t.String()).Add(float64(bytes))
	}
}

// tierCollector reads the tiers' sizes at scrape time.
type tierCollector struct {
	e                           *Engine
	blocks, capacity, offloaded *prometheus.Desc
}

func (c tierCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.blocks
	ch <- c.capacity
	ch <- c.offloaded
}

func (c tierCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.e.Load()
	for t := range kvevents.NumTiers {
		if l.TierCapacity[t] == 0 {
			continue
		}
		tier := kvevents.Tier(t).String()
		ch <- prometheus.MustNewConstMetric(c.blocks, prometheus.GaugeValue, float64(l.TierBlocks[t]), tier)
		ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(l.TierCapacity[t]), tier)
		if t > 0 {
			ch <- prometheus.MustNewConstMetric(c.offloaded, prometheus.CounterValue, float64(l.Offloaded[t]), tier)
		}
	}
}

func (m *metrics) ttft(d time.Duration) {
	if m != nil {
		m.ttftHist.Observe(d.Seconds())
	}
}

func (m *metrics) itl(d time.Duration) {
	if m != nil {
		m.itlHist.Observe(d.Seconds())
	}
}

func (m *metrics) lagged(d time.Duration) {
	if m != nil {
		m.lagHist.Observe(max(0, d.Seconds()))
	}
}

func (m *metrics) preempted() {
	if m != nil {
		m.preemptions.Inc()
	}
}

func (m *metrics) finished() {
	if m != nil {
		m.finishedReqs.Inc()
	}
}

func (m *metrics) aborted() {
	if m != nil {
		m.abortedReqs.Inc()
	}
}
