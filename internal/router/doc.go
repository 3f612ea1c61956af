// Package router picks the worker that serves a request.
//
// Policies sit behind one small interface, Policy: kv (the default),
// round-robin, random and least-loaded.
//
// The kv cost is a prediction in time when every candidate registered a
// timing profile (the simulated engines do; a bridged engine started with
// --gpu does). For a prompt of n tokens in blocks of bs that may decode out
// tokens (its max_tokens; 1 when unknown), worker w costs, in wall seconds
// (simulated seconds over the profile's Speedup):
//
//	cost_w  = α·ttft_w + out·step_w
//	ttft_w  = queued_w·bs·τ_w + load_w + P_w(n − h_w·bs, h_w·bs)
//	τ_w     = P_w(C, 0) / C
//	step_w  = S_w(inflight_w + 1 tokens, reading decode_w·bs + n tokens of KV)
//
// (α defaults to 1; lowest wins; ties go to the least loaded worker, then
// to the emptiest cache, then to the lowest hash of the prompt's chain hash
// and the worker's ID: a rule that spreads distinct prompts as evenly as
// random choice, yet depends on the request alone, so that a live cluster
// and `switchyard simulate` break every tie alike). P_w is the prefill time of w's
// profile (perfmodel.PrefillTime, chunked at its max_num_batched_tokens C,
// 8192 when unstated), S_w its step time (perfmodel.StepTime), queued_w
// and decode_w its tracked queued-prefill and active-decode blocks and
// inflight_w its requests. h_w is the hit w's engine will use: g leading
// blocks in GPU memory, plus the c and d after them in CPU memory and on
// disk when loading those beats recomputing them:
//
//	recompute = P_w(n − g·bs, g·bs) − P_w(n − (g+c+d)·bs, (g+c+d)·bs)
//	load      = L_cpu(c·bs) + L_disk(d·bs)   (bytes over the tier's bandwidth, perfmodel.LoadTime)
//	h_w, load_w = g+c+d, load   if load < recompute
//	h_w, load_w = g, 0          otherwise
//
// so ttft_w is the prompt's predicted time to first token on w: the queue
// ahead of it, priced at the per-token time of a full prefill chunk, then
// its load, then its own prefill given its hit. The load follows the wait
// because an engine admits a prompt, and starts its load, only once the
// prefills ahead leave room in a step's token budget (vLLM starts a KV
// connector's load when it schedules the request; the simulated engine
// does the same). The host link is taken into account by that order: the
// prompts ahead loaded at their own admissions, in the same order on the
// same link, and their loads landed before they computed, inside the
// wait. A hit therefore wins exactly when the prefill time it saves
// exceeds its load plus the extra queue wait of its holder.
//
// Decode load is priced as what it costs this request: every decode step
// reads the worker's decode KV, and the request takes out of them. (An earlier cost in blocks, α·(B − overlap +
// queued) + decode blocks, counted a decode block like a prefill block:
// ~850 times its one-step read time for llama-3.1-8b on an H100. On the
// Mooncake slice of the README it sent a repeated prefix away from its
// holder whenever the holder decoded long contexts or had a deep queue:
// 27 of 1,000 requests went to a worker holding at least 6 blocks fewer
// than another, losing 0.037 of all prompt tokens as hits; under the time
// cost 17 do, losing 0.017.) Approximations: the queue is priced
// linearly, without the extra attention of long queued prompts; and a
// worker's load report counts its waiting prompts whole, hits included
// (the router's own tracking counts only the blocks each must compute, and
// the larger of the two is used; see Load below).
//
// Without a timing profile for every candidate the cost falls back to
// blocks:
//
//	cost_w = α·(B − overlap_w + queued_w) + decode_w
//
// for a prompt of B blocks, where overlap_w counts GPU blocks one each and
// lower-tier blocks (c + d)·(1 − load/recompute) when load < recompute (the
// share of their prefill the hit saves), nothing otherwise. Decision.Priced
// reports that overlap in either mode.
//
// Tiers. A worker may hold part of the prompt outside GPU memory (host
// memory, disk: the index keeps each block's tiers). With
// Config.TierBlind (--router-tier-blind), lower-tier blocks count as
// misses in both costs, as a router that ignores CPU-tier events would.
//
// Rotation (round-robin, and the tie-breaking of kv and least-loaded for a
// prompt too short to fill a block) keeps one counter per candidate set, so
// a caller that picks from two pools per request (decode, then prefill)
// rotates evenly in each.
//
// overlap_w comes from the prefix index (kvindex). For a worker whose KV
// events are not healthy, the router also consults its own recent
// decisions, an approximate index with a TTL, and credits the larger of the
// two overlaps: a worker that publishes no events is therefore not treated
// as having an empty cache, which would degrade kv routing to load
// balancing.
//
// Load is tracked from the frontend's own in-flight requests and corrected
// by the load reports workers publish (ObserveLoad). A request is counted
// from its Pick (given Request.ID): Pick books it on the worker it chooses
// under the same lock as it reads the loads, so concurrent Picks see each
// other, as Dynamo's and llm-d's routers book at selection. (Counting from
// the frontend's forward instead let a handler descheduled between the two
// on a busy host send the next request to a worker that looked idle.)
// Started confirms or updates the booking: a decode worker whose prompt
// arrives by KV transfer has nothing to prefill, yet counts as a pending
// decode while its remote prefill and transfer run. FirstToken and Finished
// follow; Release gives back a pick the request never followed (the
// prefill pool's pick when the gate keeps prefill local, a request that
// failed or was abandoned first). Requests are keyed by worker and ID: a
// disaggregated request is in flight on its decode and prefill workers at
// once. A tracked request adds the blocks it computes, not its cached
// prefix, to its worker's decode load. Counting the whole prompt
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
