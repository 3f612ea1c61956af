// Package gate decides, per request, whether prefill runs on the decode
// worker D itself (local) or on a prefill worker P whose KV cache then
// crosses the network to D (remote), and it keeps the per-link throughput
// estimates that decision needs.
//
// # The model
//
// For a prompt of n tokens with h_D tokens cached on D and h_P on P:
//
//	T_local  = queue_D + prefill_D(n − h_D)
//	T_ready  = max(queue_P + prefill_P(n − h_P), backlog_P) + (n − h_D)·kv_bytes_per_token / B(P→D) + rtt
//	T_remote = max(T_ready, queue_D + decode_step_D)
//
// The KV lands in D's queue, which D serves in order, so a remote first
// token comes no sooner than D has worked through the prefills queued there
// now, plus one step for the prompt's last token. Without that floor a
// short prompt behind a busy D went remote (P and the link took
// milliseconds) and then waited out D's queue all the same: on llama-3.1-8b
// at 1 Gbit/s, 36 of 300 prompts of a median 35 tokens, measured a median
// 0.9 s over their prediction, which put TTFT p99 10% above never's. The
// floor is a lower bound: the requests that reach D before the KV lands
// queue ahead of it too (the decode worker queues a decode leg from when P
// is done, as vLLM does, so only those that arrive during P's queue and
// prefill). Pricing those as well, in trials, sent fewer long prompts
// remote, and every later request on a busy D then waited for them (the
// README's "The gate on a busy link").
//
// queue_D and queue_P price a worker's queued prefill tokens as the
// separate prompts they belong to (the waiting requests plus the one in
// progress), each attending to its own tokens only; priced as one prompt
// of all of them, attention across prompts over-predicted a deep queue
// several times over.
//
// The transfer counts the KV of every token D lacks, since D must receive all
// of it whatever P had cached. Block granularity (a partial last block is
// recomputed on D) is below the model's resolution and ignored.
//
// backlog_P is the link's queue: every remote decision commits its bytes
// to P's outbound link (shared by all of P's transfers, to any D), and the
// link drains them at B from the moment of the decision. A request's bytes
// flow once P has prefilled it and the bytes committed before it have
// drained, whichever is later. Flows on one bottleneck share it about
// fairly, so a transfer behind others finishes no later than this FIFO
// bound (exactly at it when it is the largest), and the whole backlog
// clears at it. Pricing each transfer at the full rate instead sent 147 of
// 300 llama-3.1-70b prefills remote on 1 Gbit/s and tripled TTFT p99.
// B is the link's rate, not a transfer's share of it: each observed
// transfer is credited with the time it had the link to itself, its life
// divided among the prefill worker's transfers in flight with it
// (LinkEstimator.Observe), since the backlog already counts the sharing.
// The backlog is this gate's own decisions only (other frontends' transfers
// show up through B); it drains by the clock rather than on completion, so
// a remote prefill that fails keeps its bytes in it until they would have
// drained. Predict, the what-if question, assumes an idle link.
//
// stall_D is what a local prefill costs D's running decodes. With chunked
// prefill at a budget of C tokens per step (vLLM's max_num_batched_tokens),
// the m = n − h_D new tokens run in k = ⌈m/C⌉ steps, each carrying about
// prefill_D(m)/k of compute on top of the decode step, so every running
// decode's next tokens arrive that much later:
//
//	stall_D = prefill_D(m) / k          (0 when D has no running decodes)
//	ITL_D   = decode_step_D + stall_D   (while the prefill runs)
//
// Attention makes later chunks somewhat dearer than the mean; the mean is
// the simple, documented choice. Without chunking (C = 0) k = 1 and the
// whole prefill stalls one step.
//
// # The rule (mode auto)
//
//  1. an unmeasured link counts as too slow: local ("link_unmeasured");
//  2. remote when T_remote < (1 − margin)·T_local ("remote_faster");
//  3. remote when stall_D > 0, ITL_D > itl_slo, T_remote ≤ ttft_slo and
//     (1 − margin)·T_remote ≤ T_local ("itl_protect"): the request takes a
//     first token no more than the margin slower (within the prediction's
//     error) so that D's running streams keep their inter-token target.
//     Allowed anything up to ttft_slo, it bought little ITL and cost TTFT:
//     on llama-3.1-8b at 25 Gbit/s it sent 81 of 300 prompts remote, TTFT
//     p50 went from never's 0.71 s to 1.07 s and goodput from 76% to 72%
//     (38 remote first tokens over the 2 s SLO, 15 fewer ITL misses);
//     qwen3-0.6b's longest prompts took 1.6–2.0 s first tokens for no
//     goodput gained;
//  4. otherwise local ("local_faster").
//
// Mode never always chooses local ("mode_never"), always chooses remote
// ("mode_always"); with no prefill worker the choice is local
// ("no_prefill_worker") in every mode.
//
// # Defaults and why
//
//   - margin 0.1: the prediction has error (the predicted-versus-measured
//     histogram tracks it) and a remote prefill adds a second worker and a
//     network hop that can fail and force a recompute, so remote must be
//     predicted at least 10% faster; a smaller margin flips on noise.
//   - ttft_slo 2 s: about where a long-prompt chat answer stops feeling
//     interactive; it only bounds how much TTFT itl_protect may spend.
//   - itl_slo 100 ms: 10 tokens/s, faster than people read (about 4–7
//     tokens/s); past it a stream visibly stutters.
//   - EWMA alpha 0.3: one outlier transfer moves the estimate by under a
//     third, while after five transfers an
//     old value keeps only 0.7⁵ ≈ 17% weight, so a changed link is
//     followed within a handful of requests.
//   - probe 16 MiB: ≈ 0.13 s at 1 GbE and 13 ms at 10 GbE; long enough to
//     leave TCP slow start behind at LAN round-trip times, short enough
//     not to disturb traffic.
//
// # Concurrency and cost
//
// Gate and LinkEstimator are safe for concurrent use. Decide does no I/O and
// does not allocate (a test pins it); it reads the link estimate and
// commits its bytes under one lock, so concurrent requests queue behind each
// other, and bumps one counter. Probing is the caller's job: when
// NeedsProbe reports a pair unmeasured, the caller wins MarkProbing, runs
// kvxfer's Client.Probe and reports the result with ObserveProbe.
package gate
