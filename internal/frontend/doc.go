// Package frontend is Switchyard's OpenAI-compatible HTTP server. It
// tokenizes each request once, hashes its full blocks (kvindex.HashChain with
// the request's cache_salt), asks a Router for a worker, optionally runs the
// prefill on another worker (disaggregation, in the shape of vLLM's P/D
// connector), and relays the worker's answer to the client without buffering
// a stream: every SSE event is flushed as it arrives.
//
// # Endpoints
//
//	POST /v1/chat/completions, POST /v1/completions   streaming and not
//	POST /v1/responses, POST /v1/messages              OpenAI Responses and Anthropic Messages, streaming and not
//	POST /v1/messages/count_tokens                     the frontend's token count of a Messages request
//	GET  /v1/models
//	GET  /health                                        always open
//	GET  /metrics                                       always open (Prometheus)
//	GET  /admin/router, PUT /admin/router               routing policy
//	POST /admin/reset-cache                             POST {worker}/reset_prefix_cache on every worker
//	GET  /admin/events                                  per-worker KV event details
//	POST /admin/lookup                                  prefix overlap of a prompt on each worker
//	GET  /admin/links                                   every prefill → decode link estimate
//	POST /admin/links/probe                             measure one link (Deps.Prober)
//	GET  /admin/disagg, PUT /admin/disagg               disaggregation mode and gate settings
//	POST /admin/disagg/predict                          the gate's prediction for prompt lengths
//	GET  /admin/cluster                                 the bus connection and the frontend replicas sharing state (Deps.Cluster)
//	GET  /ui                                            the dashboard (admin; 401 with its key prompt otherwise)
//
// GET /admin/links answers {"links": [{"from", "to", "bytes_per_sec",
// "rtt_ms", "measured", "samples", "emulated"}]}, one entry per registered
// (prefill worker, decode worker) pair, from Deps.Links; a pair it does not
// know is listed with measured false.
//
// POST /admin/links/probe takes {"from": prefill id, "to": decode id,
// "bytes": n} (n in (0, 1 GiB], default 64 MiB) and answers {"from", "to",
// "bytes", "seconds", "bytes_per_sec", "rtt_ms", "emulated"}. The probe may
// take bytes / 10 MB/s + 10 s; a failed probe is a 502 carrying its error.
//
// GET /admin/disagg answers {"mode", "margin", "ttft_slo_ms", "itl_slo_ms"}
// (the settings only when a GateInfo is configured); PUT /admin/disagg
// {"mode": "never"|"always"|"auto"} switches the mode for subsequent
// requests.
//
// POST /admin/disagg/predict takes {"prompt_tokens": [n, ...], "prefill": id,
// "decode": id} (1 to 64 lengths, each in [1, 1048576]; the workers default
// to the first prefill and first decode worker) and answers
// {"prefill", "decode", "predictions": [{"prompt_tokens", "kv_bytes",
// "transfer_s", "local_ttft_s", "remote_ttft_s", "choice", "reason"}],
// "link": {"bytes_per_sec", "rtt_ms", "measured", "emulated"}}, from
// Deps.Predictor with empty queues and nothing cached.
//
// Every response carries x-request-id: the client's, when it sent a usable
// one (printable ASCII, at most 128 bytes), else one the frontend made up;
// it is forwarded to workers too. Unknown paths get a 404 and wrong methods
// a 405 (with Allow), both in the OpenAI error envelope.
//
// Every proxied response carries x-switchyard-worker, x-switchyard-overlap-tokens
// and x-switchyard-policy, and, when the overlap is known by tier,
// x-switchyard-overlap-tiers (gpu=N,cpu=N,disk=N tokens on that worker); when the disaggregation gate was consulted it also
// carries x-switchyard-disagg-mode (always|auto), x-switchyard-prefill
// (local|remote), x-switchyard-disagg-reason, x-switchyard-predicted-ttft-ms,
// x-switchyard-kv-bytes-predicted (the gate's estimate) and
// x-switchyard-kv-bytes: 0 for a local prefill, and for a remote one the KV
// bytes the decode worker reports it received (its x-kv-pulled-bytes
// header), with x-switchyard-kv-pull-ms (its x-kv-pull-ms); absent when the
// worker does not report its pulls. The measured transfer also goes to the
// gate in the Observation, so link estimates learn from real transfers.
//
// Responses and Messages requests are rendered into chat turns and
// tokenized as the same chat would be, so they route alike; a worker whose
// Worker.APIs names the API gets the client's body as sent, any other the
// chat translation, its answer translated back (openai.Translator).
// Messages errors are Anthropic's shape; x-api-key is accepted as the API
// key. previous_response_id goes to the worker that stored the response.
//
// Chat messages may carry content as a string or as an array of text parts
// (joined with newlines); other part types are rejected with 400, as are
// temperature outside [0, 2] and top_p outside (0, 1].
//
// # Usage on streams
//
// Every stream is sent to the worker with stream_options.include_usage set,
// because the final usage chunk is the engine's word on what it served
// from cache (the cache-hit metrics and the index agreement need it). When
// the client did not ask for it, the relay reads that chunk and does not
// pass it on, so the client gets the events it asked for.
//
// # Authentication
//
// With Config.APIKey set, /v1/* requires "Authorization: Bearer <APIKey>"
// (the admin key is accepted too). /health and /metrics are always open.
// Admin endpoints, and the debug header x-switchyard-pin-worker, require
// "Authorization: Bearer <AdminKey>"; if AdminKey is empty, admin access is
// granted only to requests whose remote address is a loopback address. The
// API key is never an admin key. A pin header without admin access gets
// 403. The bearer scheme is matched case-insensitively (RFC 7235).
//
// /health's worker addresses (url, kvxfer_addr) are shown only to requests
// with admin access; others get the same document without them.
//
// # /health
//
// GET /health answers
//
//	{"status": "ok"|"degraded"|"unavailable", "reason": "...", "model": "...",
//	 "block_size": 16, "policy": "kv", "disagg": "auto",
//	 "bus": "up"|"down"|"stalled"|"jetstream unavailable", "bus_down_s": 3.2, "bus_cause": "...",
//	 "workers": [{"id", "role", "model", "url" (admin), "inflight",
//	              "load": {"running", "waiting", "kv_usage"},
//	              "events": {"state": "healthy", "cause", ...},
//	              "agreement": {"requests", "predicted_tokens", "engine_cached_tokens",
//	                            "blind", "stale", "trips", "unreported", "pending", "window", "window_blind",
//	                            "window_stale", "agreement", "inconsistent", "cause"},
//	              "drift": {"events", "orphan_parent", "removed_unknown_block",
//	                        "bad_event", "skipped_group", "rebuilds"} (bridges only),
//	              "block_size", "kv_blocks", "max_model_len", "kv_bytes_per_token",
//	              "kvxfer_addr" (admin), "profile"}],
//	 "refused": [{"id", "reason"}],
//	 "links": [{"from", "to", "bytes_per_sec", "rtt_ms", "measured", "samples", "emulated"}]}
//
// A worker's block_size, kv_blocks (its KV cache capacity), max_model_len,
// kv_bytes_per_token, kvxfer_addr and profile appear
// only when set. links, the same entries as GET /admin/links, appears only
// when there are prefill workers (and decode workers to pair them with).
//
// events.state is "inconsistent" when the worker's KV events flow but the
// index they built disagrees with what its engine serves from cache
// (agreement; see agree.go), or its bridge drops more than 5% of the
// engine's events (drift; see drift.go): the router then routes it by the
// approximate index, as a silent worker, until a clean window.
//
// status is "degraded" (HTTP 200) when any worker's KV events are not
// healthy or the bus is down (the registry cannot be heard: the frontend
// then routes to the last known workers, fail static), and "unavailable" (HTTP 503, with reason) when no worker can serve
// requests (none registered, all refused, or only prefill workers).
//
// # Failures
//
// A request is retried once, on another worker chosen by the router without
// the failed one, only when the failed worker cannot be working on it: the
// connection failed before any response (refused, reset, closed), the worker
// answered 5xx, or it sent stream headers and dropped the connection before
// any body byte. A timeout is never retried: the worker may still be
// generating, and a retry would run the request twice. It is a 504 (or, once
// a stream has started, an error event) counted as kind timeout (header or
// request timeout) or upstream_idle_timeout. A worker's 4xx is relayed as it
// is and counted as worker_4xx. Each failed attempt counts once in
// switchyard_errors_total.
//
// A failed remote prefill falls back to local prefill on the decode worker;
// a decode worker that fails after a successful remote prefill is retried on
// another worker with the original body, prefilling locally (P's
// kv_transfer_params are meant for the failed worker). Both count in
// switchyard_prefill_fallbacks_total. The gate does not learn from a retried
// request: its TTFT includes the failed attempt. A failure after bytes
// reached the client ends an SSE stream with data: {"error":{...}} and
// data: [DONE]; a non-streaming request gets an OpenAI-shaped 502.
//
// Every upstream call is bounded by a connect timeout, an idle-between-chunks
// timeout and an overall request timeout (RequestTimeout). A streaming
// request's wait for response headers is bounded by HeaderTimeout. A
// non-streaming worker sends headers only when the whole generation is done,
// so a fixed deadline would cut long generations: instead a watchdog checks
// the worker's liveness (GET /health, any status below 500 within the
// connect timeout) so that the check ends by HeaderTimeout, and gives the
// request up (504, kind timeout) only when the worker does not answer it.
// The client's disconnect cancels the upstream request.
//
// # Outlier ejection
//
// Workers are judged by the requests sent to them. After EjectAfter
// (default 2) consecutive connect failures, or one timeout, a worker is
// ejected: no new request is routed to it (unless every candidate is
// ejected) and /health shows it with ejected and eject_cause. A probe of
// GET /health after EjectProbeEvery (1 s, backing off to 8 s) brings it
// back. switchyard_worker_ejections_total counts ejections.
//
// When a worker leaves the registry without deregistering (its entry
// expired and it fails a health check too: dead or frozen; one whose only
// fault is its bus link stays), the node calls CancelWorker: its
// requests in flight are cancelled, retried on another worker if nothing
// was relayed yet, else ended with an error event (kind worker_gone). A
// worker that deregisters itself is shutting down cleanly and drains its
// requests, so they are left alone.
//
// # Metrics
//
// switchyard_requests_total{endpoint,code}, switchyard_request_duration_seconds{endpoint}
// (every request; endpoint is chat, completions, the path of other routes,
// or unmatched), switchyard_ttft_seconds, switchyard_itl_seconds,
// switchyard_errors_total{kind}, switchyard_retries_total,
// switchyard_prefill_fallbacks_total, switchyard_prompt_tokens_total,
// switchyard_cache_hit_tokens_total, switchyard_worker_ejections_total,
// switchyard_worker_gone_cancels_total, switchyard_shed_total{scope},
// switchyard_client_connections and
// switchyard_client_connections_refused_total,
// switchyard_index_predicted_tokens_total{worker},
// switchyard_engine_cached_tokens_total{worker} and
// switchyard_index_agreement{worker} (index agreement); the tokenizer's
// section (or, for cl100k, chat-turn) cache's switchyard_tokenizer_cache_hits_total,
// switchyard_tokenizer_cache_misses_total and
// switchyard_tokenizer_cache_bytes.
//
// # Client limits
//
// Server.Listener caps open connections (MaxConnections; one more gets 503
// with Retry-After and is closed) and gives each a 64 KiB send buffer. A
// request body must arrive within ClientReadTimeout (else 408). Every
// write to a client has a deadline ClientStallTimeout ahead: a client that
// stops reading is cut off and its upstream request cancelled (kind
// client_slow). MaxInflight and MaxInflightPerWorker shed load with 429 and
// Retry-After. Header and idle timeouts belong to the http.Server (the
// node sets them).
//
// # Admission, tenants and draining
//
// Every completion request (but a pinned one) is admitted by package
// admit before it is routed: when every routable serving worker has
// MaxInflightPerWorker requests open it waits in a fair queue (priority
// from the x-switchyard-priority header, then tenants by weight on the
// request's estimated tokens), bounded by MaxQueue and QueueTimeout. A
// refusal is a 429 (503 when no worker can serve) with Retry-After,
// x-switchyard-limit naming the limit and, for a rate-limited tenant,
// OpenAI's x-ratelimit-* headers. With Config.Tenants the bearer key names
// the tenant, and an isolated tenant's prompt is hashed from, and sent
// upstream with, a cache_salt derived from its key. /health carries the
// queue as "admission".
//
// A worker whose registry entry says Draining gets no new request. After
// SetDraining(true) the frontend answers new completions 503 with
// Retry-After and /health 503 with status "draining", while the requests
// it serves carry on (Serving counts them).
//
// # Concurrency
//
// A Server is safe for concurrent use. Beyond what net/http does per
// request, it starts one probe goroutine per ejected worker, which ends
// when the worker answers, leaves the pool or Close is called; Close waits
// for them and releases idle upstream connections.
package frontend
