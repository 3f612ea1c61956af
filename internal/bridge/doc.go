// Package bridge puts a real engine (vLLM, SGLang) into a Switchyard
// deployment. A Bridge runs beside one engine: it registers the engine in
// the worker registry under the engine's own HTTP URL (clients' tokens go
// straight from the frontend to the engine, never through the bridge),
// subscribes to the engine's ZeroMQ KV events, rewrites them into
// Switchyard's block hashes (see Mirror) and republishes them on NATS in
// Switchyard's event format, with an epoch, gap-free sequence numbers and
// heartbeats, serving snapshots from its mirror. It reports the engine's
// load from its /metrics and its health from /health.
//
// # Engine-side gaps
//
// Engines send no heartbeats. vLLM numbers its batches from 0; other
// vLLM-compatible engines start anywhere (1 has been seen). The bridge
// applies batch n only after n-1. On a gap it asks the engine's replay
// socket for the missing batches; on a restart (a sequence number lower
// than expected, or a new process_start_time_seconds) it clears the
// worker, in band, and takes the new run from its first batch. When
// replay is not configured or does not reach back far enough, the mirror
// cannot be trusted: the bridge clears it (a Cleared event), makes the
// frontend resync (Publisher.Resync) and declines snapshots for
// RebuildHold, so the frontend routes that worker on its approximate index
// meanwhile; after the hold it serves what it has seen since the clear. A
// batch whose payload does not decode is such a loss too. Frames that do
// not even carry a sequence number are counted, logged (rate-limited) and
// dropped.
//
// # First contact is not loss
//
// The first batch the bridge sees of an engine run (at start-up, or after
// a restart) need not be numbered 0. The bridge knows the engine published
// nothing earlier, and takes that batch as the run's first without a
// rebuild, when either
//
//   - its start-up replay (from 0) returned nothing, and the replay it asks
//     for on the first live batch starts exactly at that batch; or
//   - the replay buffer starts at the engine's first batch and is not full:
//     it holds fewer batches than the engine's buffer_steps
//     (Config.ReplayBufferSteps, vLLM's default 10000), and an engine
//     evicts from its buffer only once it is full, so nothing before its
//     first batch was ever published.
//
// Otherwise a first batch above 0 may follow batches the bridge will never
// see, and it rebuilds. A bridge whose engine runs with a smaller
// buffer_steps must be told (--kv-replay-buffer), or a full buffer would
// pass for a whole history.
//
// # Orphans and drift
//
// A BlockStored whose parent the mirror does not hold (its event was lost,
// or the parent was a partial page) is never dropped silently: its chain
// is indexed under a root of its own, derived from the parent's engine
// hash, so no prompt can match it but the engine's later blocks link to it
// and their removals are recognised. A root block's parent may be absent,
// nil or 0. Orphans, removals of unknown blocks, inconsistent events and
// skipped KV groups are counted (Stats) and published with every load
// report (bus.Drift), so the frontend can tell a worker whose index drifts
// from its engine.
//
// It does not decide routing, and it never trusts the engine's block hashes
// as routing keys.
package bridge
