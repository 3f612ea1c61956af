// Package enginewire decodes the KV-cache events that real engines publish
// on ZeroMQ: vLLM's KVEventBatch and SGLang's copy of it. It is a
// hand-written MessagePack reader (no reflection) that decodes into reused
// structs, so a stream of batches decodes without allocating.
//
// Every variant the engines have shipped is accepted:
//
//   - the batch as a positional array [ts, events, dp_rank] or as a map
//     (dp_rank is data_parallel_rank in vLLM, attn_dp_rank in SGLang);
//   - events as tagged positional arrays ["BlockStored", f1, f2, …] with
//     trailing defaults omitted, or as maps whose "type" key names the event
//     and whose default-valued fields are omitted;
//   - block hashes as signed or unsigned integers of any width, or as bin
//     bytes, of which the last 8 are read big-endian;
//   - unknown map keys and trailing array elements, which are skipped.
//
// Events of a KV cache group other than 0, or whose kv_cache_spec_kind is
// not full_attention, are decoded but flagged Skip: only the full-attention
// group describes the prefix a router can match.
//
// Frames around the payload (topic, 8-byte big-endian sequence number, the
// replay socket's layouts) are parsed by ParseLive and ParseReplay.
//
// It does not hash, index or route: the bridge package turns decoded events
// into Switchyard's own block hashes.
package enginewire
