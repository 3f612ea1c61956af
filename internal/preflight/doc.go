// Package preflight is the go-live checklist for a running Switchyard
// deployment. Run talks to one frontend over HTTP and checks, in order:
//
//  1. inventory: workers by role, model and block size; mismatches and
//     refused workers fail;
//  2. kv-events: a unique probe pinned to each worker must show up in the
//     frontend's prefix index within 2 s, without sequence gaps, with a fresh
//     heartbeat;
//  3. prefix-cache: the same prompt cold then warm on each serving worker;
//     cached_tokens must cover the prompt's full blocks and warm TTFT must be
//     lower;
//  4. routing: a short repeated-prefix workload through the router; the
//     cache-hit ratio against the ideal 1.0;
//  5. links: a fresh kvxfer probe per prefill→decode pair, classified by
//     throughput band;
//  6. disagg: KV bytes, transfer time and predicted local versus remote TTFT
//     per prompt length, the break-even length and the recommended --disagg.
//
// Every check yields PASS, WARN or FAIL with the numbers behind it; the
// report renders as a table, Markdown or JSON (docs/preflight-schema.md).
//
// Layout: config.go (Config), client.go (HTTP, SSE probes and admin calls),
// checks.go (checks 1–4), disagg.go (checks 5–6), report.go (result types),
// render.go (table, Markdown, JSON).
//
// Run sends requests one at a time and starts no goroutine that outlives it.
// preflight judges a deployment; it does not load-test it (that is bench).
// Its probes are small: they add a few blocks to each worker's cache and
// never reset it.
package preflight
