// Package kvevents carries KV-cache events from workers to the frontend's
// prefix index: the event types, their wire codec, the worker-side
// Publisher and the frontend-side Consumer that applies batches to an index
// and tracks each worker's event health.
//
// # Ordering
//
// A worker publishes every batch from one NATS connection. NATS delivers the
// messages of one publishing connection on one subject in publish order to
// each subscriber, and routes between cluster nodes keep that order, so the
// consumer sees a worker's batches in sequence order unless some are lost.
// Sequence numbers start at 1 in each epoch (a new epoch at every worker
// start, taken from the clock so a restart's epoch is larger) and count every
// batch, heartbeats included, so any loss shows as a gap.
//
// # Loss, backpressure and recovery
//
// Nothing is retried or acknowledged. A publish never blocks the engine:
// nats.Conn buffers it (and, while disconnected, up to the connection's
// reconnect buffer), and a failed publish is counted and logged, still
// consuming its sequence number. A consumer that falls behind is cut off by
// NATS as a slow consumer, which drops messages. Every one of these is seen
// by the consumer as a gap (or as silence), and it resynchronises: it asks
// the worker for a snapshot of the blocks it holds, tagged with the sequence
// number of the last batch included, replaces the worker's index entries
// with it, and replays the batches it buffered meanwhile that come after.
//
// # Health
//
// Each worker is in one of four states: healthy (in sync), resyncing (a gap,
// an epoch change or first contact mid-stream; also a registered worker not
// yet heard from), silent (no batch or heartbeat for SilenceAfter; default
// 2.5 s against a 1 s heartbeat, so a stalled stream is flagged within 3 s)
// and disabled (the registry says the worker publishes no events). While a
// worker is silent or resyncing its index entries are kept, but marked
// unhealthy: the router should then use its approximate fallback for that
// worker rather than trust them, and never assume an empty cache.
//
// # Engines without heartbeats
//
// A real engine (vLLM, SGLang) publishes a batch only when a scheduler step
// changed its cache, so an idle engine is silent; its bridge sends the
// heartbeats, which prove the bridge alive but not the engine's event
// stream. Silence alone therefore never marks such a worker unhealthy.
// Instead the frontend tells the consumer, with ExpectEvents, about each
// request that should make its worker store blocks (the prompt has full
// blocks the index does not show there, whether the worker computes them
// or, as the decode worker of a remote prefill, receives them by KV
// transfer) once the request's first token arrives: the engine has
// computed or received those blocks by then and published their
// BlockStored at the end of that step. If no batch with events follows the
// request's routing within ExpectWithin (2.5 s), or ExpectGrace (0.5 s)
// after its first token when that came later, the worker turns silent with
// that cause; with the 100 ms check tick a stopped stream is flagged within
// 3 s of the first such request whenever its first token came within 2.5 s.
// Heartbeats do not clear it; the next batch with events does, and so does
// a snapshot asked for after the request's first token (the blocks it
// stored are in it: after a NATS outage lost their events, the resync's
// exact index must not be flagged by them). A request
// whose blocks the engine had cached unbeknown to the index stores nothing,
// so it could flag a false silent; the index under-counts only after a
// bridge rebuilt its mirror, and the next batch with events clears it.
//
// # Tiers
//
// Every Stored and Removed event names its medium (Event.Medium, a Tier:
// GPU, CPU or disk) exactly as vLLM's events do: an eviction that offloads a
// block is a GPU Removed followed by a CPU Stored, and a block loaded back is
// a GPU Stored while its CPU copy stays. The index keeps the tiers per
// (block, worker). ParseMedium maps an engine's medium name onto a Tier; an
// unknown name is counted (WorkerHealth.UnknownMedia,
// switchyard_kv_event_unknown_medium_total) and indexed as the slowest tier,
// never as the GPU. Cleared drops every tier.
//
// It does not decide routing and does not persist anything.
package kvevents
