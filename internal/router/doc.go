// Package router picks the worker that serves a request.
//
// Policies sit behind one small interface, Policy: kv (the default),
// round-robin, random and least-loaded. The kv policy scores worker w for a
// prompt of B blocks as
//
//	cost_w = α·(B − overlap_w + queued_prefill_blocks_w) + active_decode_blocks_w
//
// (α defaults to 1; lowest wins; ties go to the least loaded worker, then
// rotate).
//
// Tiers. A worker may hold part of the prompt outside GPU memory (host
// memory, disk: the index keeps each block's tiers). overlap_w is then the
// prefill time the hit saves, counted in blocks. With g leading blocks in
// GPU memory and c and d more in CPU memory and on disk, on a worker whose
// registered profile gives prefill time P(new, cached) and load time L
// (bytes over the tier's host-link or disk bandwidth, perfmodel.LoadTime):
//
//	recompute = P(n − g·bs, g·bs) − P(n − (g+c+d)·bs, (g+c+d)·bs)
//	load      = L_cpu(c·bs) + L_disk(d·bs)
//	overlap_w = g + (c + d) · (1 − load/recompute)   if load < recompute
//	overlap_w = g                                    otherwise
//
// for a prompt of n tokens in blocks of bs. A GPU hit saves all of its
// prefill; a lower-tier hit saves recompute minus load, and nothing when
// loading is slower than recomputing (a small, memory-bound prefill
// recomputes for free; the simulated engine then recomputes too). Without a
// profile, or with Config.TierBlind (--router-tier-blind), lower-tier blocks
// count as misses, as a router that ignores CPU-tier events would. Rotation (round-robin, and the tie-breaking of kv and
// least-loaded) keeps one counter per candidate set, so a caller that picks
// from two pools per request (decode, then prefill) rotates evenly in each.
//
// overlap_w comes from the prefix index (kvindex). For a worker whose KV
// events are not healthy, the router also consults its own recent
// decisions, an approximate index with a TTL, and credits the larger of the
// two overlaps: a worker that publishes no events is therefore not treated
// as having an empty cache, which would degrade kv routing to load
// balancing.
//
// Load is tracked from the frontend's own in-flight requests (Started,
// FirstToken, Finished) and corrected by the load reports workers publish
// (ObserveLoad). A tracked request adds the blocks it computes, not its
// cached prefix, to its worker's decode load. Counting the whole prompt
// (as Dynamo's active_decode_blocks does) was tried: at α = 1 it outweighs
// the saved prefill as soon as two requests share a prefix, and on the e2e
// bench (5 prefixes, concurrency 4) kv's hit ratio fell from 0.99 to 0.55,
// level with round-robin, though a cached request's TTFT barely depends on
// its worker's decode batch. Worker load reports still carry the full KV
// in use (ActiveDecodeBlocks), so a real hotspot shows.
//
// A Router is safe for concurrent use. It starts no goroutines. It does not
// know which workers exist or whether their events are healthy: the caller
// passes the candidates of each request.
package router
