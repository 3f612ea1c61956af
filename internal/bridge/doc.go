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
// Engines number their batches from 0 and send no heartbeats. The bridge
// applies batch n only after n-1. On a gap it asks the engine's replay
// socket for the missing batches; on a restart (a sequence number lower
// than expected) it clears the worker, in band, and replays the new run
// from 0. When replay is not configured or does not reach back far enough,
// the mirror cannot be trusted: the bridge clears it (a Cleared event), makes
// the frontend resync (Publisher.Resync) and declines snapshots for
// RebuildHold, so the frontend routes that worker on its approximate index
// meanwhile; after the hold it serves what it has seen since the clear. A
// batch whose payload does not decode is such a loss too. Frames that do
// not even carry a sequence number are counted, logged (rate-limited) and
// dropped.
//
// It does not decide routing, and it never trusts the engine's block hashes
// as routing keys.
package bridge
