package sim

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	preemptions   prometheus.Counter
	finishedReqs  prometheus.Counter
	abortedReqs   prometheus.Counter
	pullFailures  prometheus.Counter
	pulledBlocks  prometheus.Counter
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
	gauge("vllm:num_requests_running", "Requests in the running batch.", func(l Load) float64 { return float64(l.Running) })
	gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.", func(l Load) float64 { return float64(l.Waiting) })
	gauge("vllm:kv_cache_usage_perc", "Fraction of KV blocks in use (0-1).", func(l Load) float64 { return l.KVUsage })
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
		f(c)
		return c
	}
	m.prefixQueries = counter("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.")
	m.prefixHits = counter("vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.")
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

func (m *metrics) prefixLookup(queried, hit int) {
	if m == nil {
		return
	}
	m.prefixQueries.Add(float64(queried))
	m.prefixHits.Add(float64(hit))
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
