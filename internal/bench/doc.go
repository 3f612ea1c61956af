// Package bench drives a live Switchyard (or any OpenAI-compatible) deployment
// with a named scenario or a real trace and reports what routing and
// disaggregation did to the traffic: TTFT, inter-token latency and end-to-end
// latency percentiles, throughput, prefix-cache hit ratio, goodput under SLOs,
// and every rejection and error, counted rather than hidden.
//
// Layout by responsibility:
//   - trace.go: Mooncake (JSONL) and Azure (CSV) trace readers;
//   - prompt.go: deterministic token-ID prompt builder with exact prefix sharing;
//   - workload.go: the routing, disagg and trace scenarios as request plans;
//   - client.go, admin.go: the streaming load client and the frontend's admin API;
//   - runner.go: arrival scheduling, concurrency limits, policy comparison;
//   - stats.go, report.go, plot.go, progress.go: aggregates, tables, JSON, plots
//     and progress output;
//   - selftest.go: an in-process trivial SSE server to measure bench itself.
//
// Prompts are arrays of token IDs so prefix sharing and token counts are
// exact at the serving layer. Everything that is random is derived from
// Config.Seed, so two runs with the same flags send the same prompts in the
// same order. Run is safe to call from one goroutine at a time per Config; it
// owns every goroutine it starts and returns only after they have exited.
//
// bench does not judge results: it measures and reports. Pass/fail checks
// belong to preflight.
package bench
