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
//	GET  /v1/models
//	GET  /health                                        always open
//	GET  /metrics                                       always open (Prometheus)
//	GET  /admin/router, PUT /admin/router               routing policy
//	POST /admin/reset-cache                             POST {worker}/reset_prefix_cache on every worker
//	GET  /admin/events                                  per-worker KV event details
//	POST /admin/lookup                                  prefix overlap of a prompt on each worker
//
// Every proxied response carries x-switchyard-worker, x-switchyard-overlap-tokens
// and x-switchyard-policy; when the disaggregation gate was consulted it also
// carries x-switchyard-prefill (local|remote), x-switchyard-disagg-reason,
// x-switchyard-predicted-ttft-ms and x-switchyard-kv-bytes.
//
// # Authentication
//
// With Config.APIKey set, /v1/* requires "Authorization: Bearer <APIKey>"
// (the admin key is accepted too). /health and /metrics are always open.
// Admin endpoints, and the debug header x-switchyard-pin-worker, require
// "Authorization: Bearer <AdminKey>"; if AdminKey is empty the APIKey is the
// admin key; if both are empty, admin access is granted only to requests
// whose remote address is a loopback address. A pin header without admin
// access gets 403.
//
// # /health
//
// GET /health answers
//
//	{"status": "ok"|"degraded"|"unavailable", "reason": "...", "model": "...",
//	 "block_size": 16, "policy": "kv", "disagg": "auto",
//	 "workers": [{"id", "role", "model", "url", "inflight",
//	              "load": {"running", "waiting", "kv_usage"},
//	              "events": {"state": "healthy", "cause", ...}}],
//	 "refused": [{"id", "reason"}]}
//
// status is "degraded" (HTTP 200) when any worker's KV events are not
// healthy, and "unavailable" (HTTP 503, with reason) when no worker can serve
// requests (none registered, all refused, or only prefill workers).
//
// # Failures
//
// A worker that fails before the first byte of its answer (connection
// refused, 5xx status, timeout to headers, connection dropped before any body
// byte) is retried once on another worker chosen by the router without the
// failed one. A failure after bytes reached the client ends an SSE stream
// with data: {"error":{...}} and data: [DONE]; a non-streaming request gets an
// OpenAI-shaped 502. Every upstream call is bounded by a connect timeout, a
// header timeout, an idle-between-chunks timeout and an overall request
// timeout; the client's disconnect cancels the upstream request.
//
// # Concurrency
//
// A Server is safe for concurrent use. It starts no goroutines of its own
// beyond what net/http does per request; Close releases idle upstream
// connections.
package frontend
