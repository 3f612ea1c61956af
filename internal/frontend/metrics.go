package frontend

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-llm/switchyard/internal/prom"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// Error kinds of switchyard_errors_total.
const (
	errKindBadRequest     = "bad_request"
	errKindUnauthorized   = "unauthorized"
	errKindNoWorkers      = "no_workers"
	errKindRouter         = "router"
	errKindUpstreamConn   = "upstream_connect"
	errKindUpstreamStatus = "upstream_status"
	errKindUpstreamStream = "upstream_stream"
	errKindUpstreamIdle   = "upstream_idle_timeout"
	errKindTimeout        = "timeout" // header or request timeout; never retried
	errKindWorker4xx      = "worker_4xx"
	errKindClientCanceled = "client_canceled"
	errKindPrefill        = "prefill_failed"
	errKindProbe          = "probe_failed"
	errKindPredict        = "predict_failed"
	errKindWorkerGone     = "worker_gone" // the worker left the registry with the request in flight
	errKindClientSlow     = "client_slow" // body too slow, or a stream the client stopped reading
	errKindShed           = "shed"        // refused with 429 by --max-inflight
)

// Outcomes of switchyard_worker_requests_total: one per attempt on a
// worker (a retried request counts on each worker it tried).
const (
	outcomeOK       = "ok"       // answered 2xx and relayed in full
	outcomeRejected = "rejected" // the worker answered 4xx (relayed as it is)
	outcomeError    = "error"    // connect failure, 5xx, a broken or error-ended stream
	outcomeTimeout  = "timeout"  // header, request or idle timeout
	outcomeCanceled = "canceled" // the client went away or stopped reading
)

// metrics are every collector the frontend defines. Router, event and gate
// metrics belong to their packages and share the registry.
type metrics struct {
	requests    *prometheus.CounterVec   // endpoint, code
	duration    *prometheus.HistogramVec // endpoint
	ttft        prometheus.Histogram
	itl         prometheus.Histogram
	cacheHit    prometheus.Counter
	promptToks  prometheus.Counter
	errors      *prometheus.CounterVec // kind
	retries     prometheus.Counter
	fallbacks   prometheus.Counter
	ejections   prometheus.Counter
	connRefused prometheus.Counter
	shed        *prometheus.CounterVec // scope
	cancelled   prometheus.Counter
	// workerRequests is worker, outcome: worker ids come from the
	// registry, so the label set is as large as the deployment.
	workerRequests *prometheus.CounterVec
	// modelRequests is model, code: models are the names workers
	// registered, so the label set is as large as the fleet.
	modelRequests *prometheus.CounterVec
	// Index agreement, by worker (see agree.go).
	indexPredicted *prometheus.CounterVec
	engineCached   *prometheus.CounterVec
	indexAgreement *prometheus.GaugeVec
}

func newMetrics(reg *prometheus.Registry) (*metrics, error) {
	m := &metrics{
		requests: prom.CounterVec("switchyard_requests_total",
			"Requests served by the frontend, by endpoint and HTTP status code.", "endpoint", "code"),
		modelRequests: prom.CounterVec("switchyard_model_requests_total",
			"Completion requests by the model they named (a base model, alias or LoRA adapter; unknown when no worker serves it) and HTTP status code.", "model", "code"),
		// From a sub-millisecond /health to a completion streaming for
		// minutes.
		duration: prom.HistogramVec("switchyard_request_duration_seconds",
			"Time from request arrival to the end of the response, by endpoint (unmatched for unknown paths and methods).",
			prometheus.ExponentialBuckets(0.001, 2.5, 14), "endpoint"),
		// TTFT spans 10 ms (cached, short prompt) to minutes (the field
		// report's 3.4 s KV move, queued long prompts).
		ttft: prom.Histogram("switchyard_ttft_seconds",
			"Time from request arrival at the frontend to the first content chunk relayed.",
			prometheus.ExponentialBuckets(0.005, 2, 16)),
		// Decode steps take ~5–100 ms on real GPUs; the simulated engine can be faster.
		itl: prom.Histogram("switchyard_itl_seconds",
			"Gap between consecutive content chunks relayed to the client.",
			prometheus.ExponentialBuckets(0.0005, 2, 14)),
		cacheHit: prom.Counter("switchyard_cache_hit_tokens_total",
			"Prompt tokens served from the prefix cache, from the usage workers report."),
		promptToks: prom.Counter("switchyard_prompt_tokens_total",
			"Prompt tokens, from the usage workers report."),
		errors: prom.CounterVec("switchyard_errors_total",
			"Frontend errors by kind.", "kind"),
		retries: prom.Counter("switchyard_retries_total",
			"Requests retried on another worker after a failure before the first byte."),
		fallbacks: prom.Counter("switchyard_prefill_fallbacks_total",
			"Remote prefills that failed and fell back to local prefill on the decode worker."),
		ejections: prom.Counter("switchyard_worker_ejections_total",
			"Workers ejected from routing after consecutive connect failures or a timeout (probed back in)."),
		cancelled: prom.Counter("switchyard_worker_gone_cancels_total",
			"Requests in flight cancelled because their worker left the registry without deregistering."),
		connRefused: prom.Counter("switchyard_client_connections_refused_total",
			"Client connections answered 503 and closed because MaxConnections were open."),
		workerRequests: prom.CounterVec("switchyard_worker_requests_total",
			"Requests sent to each worker, by outcome: ok, rejected (worker 4xx), error, timeout or canceled. A retried request counts once per worker tried.",
			"worker", "outcome"),
		shed: prom.CounterVec("switchyard_shed_total",
			"Requests refused with 429 by load shedding: scope global (--max-inflight), admission (the admission queue: shed, queue timeout, full queue, a tenant's rate limit) or worker (every candidate full after admission).",
			"scope"),
		indexPredicted: prom.CounterVec("switchyard_index_predicted_tokens_total",
			"Cached prompt tokens the KV-event index predicted on the chosen worker, over the responses judged for index agreement (either side claimed a hit).",
			"worker"),
		engineCached: prom.CounterVec("switchyard_engine_cached_tokens_total",
			"Prompt tokens the engine says it served from cache (usage cached_tokens), over the responses judged for index agreement.",
			"worker"),
		indexAgreement: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchyard_index_agreement",
			Help: "Share of the worker's recent judged responses (the last 50, within 60 s) on which the index's predicted cached prefix agreed with what the engine served, within a block."},
			[]string{"worker"}),
	}
	if err := prom.Register(reg, "frontend", m.indexPredicted, m.engineCached, m.indexAgreement, m.requests, m.duration, m.ttft, m.itl, m.cacheHit, m.promptToks, m.errors, m.retries, m.fallbacks, m.ejections, m.cancelled, m.connRefused, m.shed, m.workerRequests, m.modelRequests); err != nil {
		return nil, err
	}
	return m, nil
}

// tokenizerCacheMetrics are the series of a tokenizer's section cache
// (tokenizer.HF), read at scrape time from stats.
func tokenizerCacheMetrics(stats func() tokenizer.CacheStats) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "switchyard_tokenizer_cache_hits_total",
			Help: "Prompt sections of at least 256 bytes (a chat turn; with a tokenizer.json, the text between special tokens) whose token ids came from the tokenizer's cache."},
			func() float64 { return float64(stats().Hits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "switchyard_tokenizer_cache_misses_total",
			Help: "Prompt sections of at least 256 bytes that were encoded; a section is cached when it is seen a second time."},
			func() float64 { return float64(stats().Misses) }),
		prom.GaugeFunc("switchyard_tokenizer_cache_bytes",
			"Bytes the tokenizer's section cache holds (text, ids and overhead), up to its bound.",
			func() float64 { return float64(stats().Bytes) }),
	}
}
