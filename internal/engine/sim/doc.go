// Package sim is Switchyard's simulated engine worker: a paged KV block
// manager with prefix caching, a continuous-batching scheduler with chunked
// prefill and preemption by recompute, a roofline clock (internal/perfmodel),
// and the OpenAI-compatible worker HTTP API, so the whole system runs and is
// tested without a GPU.
//
// Time is simulated: every scheduler step advances the engine's clock by the
// step's modelled duration, and the run loop sleeps that long divided by
// Config.Speedup before delivering the step's tokens. Timings reported per
// request (queue, prefill, TTFT) are in simulated time, so they are exact
// functions of the workload and never of the host's noise.
//
// The scheduler, block manager and clock form a Core: synchronous, with no
// lock, goroutine or wall clock. The live Engine drives one Core under its
// mutex, pacing it to the wall clock; `switchyard simulate` drives many in
// virtual time with Core.Add and Core.Advance. Both run the same step code.
//
// Block hashes are kvindex chained hashes over full blocks, seeded by the
// request's cache_salt, exactly as the frontend computes them. Every block
// stored, evicted or cleared becomes a kvevents.Event, handed to the
// EventPublisher once per step (only when the step has events), under the
// engine's lock, so SnapshotBlocks sees a state consistent with the events
// published so far.
//
// Tiers: with Config.KVOffloadGiB (and KVDiskGiB) a block evicted from the
// GPU is written to host memory (and one evicted from there to disk), LRU
// with reference counts like the GPU tier. A write queues on the
// device-to-host link at the preset's host-link bandwidth and never blocks a
// step; a prompt whose prefix continues in a lower tier has those blocks
// loaded back over the host link (queued there too) before it computes the
// rest, unless recomputing them would be faster (perfmodel.LowerTierSaving).
// Events follow vLLM: an eviction that offloads is a GPU Removed and a CPU
// Stored; a loaded block is a GPU Stored and keeps its lower-tier copy.
//
// Disaggregation: a decode leg whose prefill ran on another worker pulls
// that KV into the cache before it is scheduled, and then keeps the place
// in the waiting queue it took when it arrived, before the pull
// (Request.QueuedAt): vLLM queues such a request on arrival and skips it,
// without losing its place, until its KV is in (WAITING_FOR_REMOTE_KVS).
// Queued at the end of the pull instead, it waited behind every request
// that reached the worker while its KV crossed. vLLM starts the pull only
// when its scheduler reaches the request; here the pull starts on arrival.
//
// KV payloads are not held: a block's bytes are kvpayload.Fill(hash, ...)
// whenever a transport needs them.
//
// A Worker is safe for concurrent use; its Run loop is the only goroutine it
// owns and returns when its context is done.
package sim
