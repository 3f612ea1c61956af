#!/usr/bin/python3
"""Writes the golden payloads in this folder with Debian's python3-msgpack.

Each *.msgpack file is one KVEventBatch payload laid out the way a vLLM or
SGLang release sends it (see ../../../../shared/ENGINES.md). The decoded form
each must give is in the matching *.golden file, written by the Go test with
-update. Run from anywhere: /usr/bin/python3 gen_golden.py
"""
import hashlib
import os
import msgpack

here = os.path.dirname(os.path.abspath(__file__))
TS = 1764567890.25
toks = list(range(1000, 1032))  # two 16-token blocks


def write(name, obj):
    with open(os.path.join(here, name + ".msgpack"), "wb") as f:
        f.write(msgpack.packb(obj, use_bin_type=True))


# vLLM before mid-2026: tagged positional events, trailing defaults omitted.
write("vllm_array_events", [TS, [
    ["BlockStored", [0xDEADBEEF00000001, 0xDEADBEEF00000002], None, toks, 16, None, "GPU"],
    ["BlockStored", [7], 0xDEADBEEF00000002, list(range(16)), 16],
    ["BlockRemoved", [0xDEADBEEF00000001], "GPU"],
    ["AllBlocksCleared"],
], 0])

# vLLM 0.26: events as maps with "type" first, defaults omitted; salt in
# extra_keys on the first block only.
write("vllm_map_events", [TS, [
    {"type": "BlockStored", "block_hashes": [2**64 - 1, 2**63], "parent_block_hash": None,
     "token_ids": toks, "block_size": 16, "medium": "GPU", "extra_keys": [["tenant-a"], None]},
    {"type": "BlockRemoved", "block_hashes": [2**63], "medium": "GPU"},
    {"type": "AllBlocksCleared"},
], 0])

# The vLLM revision that declared the batch as a map.
write("vllm_map_batch", {"ts": TS, "events": [
    {"type": "BlockStored", "block_hashes": [11], "token_ids": list(range(16)), "block_size": 16,
     "parent_block_hash": 10, "medium": "CPU"},
], "data_parallel_rank": 3})

# VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0: raw digests as bin.
d1 = hashlib.sha256(b"block-1").digest()
d2 = hashlib.sha256(b"block-2").digest()
write("vllm_bin_hashes", [TS, [
    {"type": "BlockStored", "block_hashes": [d1], "parent_block_hash": d2, "token_ids": list(range(16)),
     "block_size": 16, "medium": "GPU"},
    {"type": "BlockRemoved", "block_hashes": [d1, b"\x01\x02"]},
]])

# SGLang: signed int64 hashes, one event per page, CPU_PINNED and DISK
# media, a partial last page, attn_dp_rank.
write("sglang_signed", [TS, [
    ["BlockStored", [-2], None, list(range(16)), 16, None, "GPU"],
    ["BlockStored", [-3], -2, list(range(16, 24)), 16, None, "CPU_PINNED"],
    ["BlockRemoved", [-9223372036854775808], "DISK"],
], 1])
write("sglang_map_batch", {"ts": TS, "events": [
    ["BlockStored", [5], None, list(range(16)), 16],
], "attn_dp_rank": 2})

# Unknown keys, trailing elements, a future event type, unknown medium.
write("forward_compat", [TS, [
    {"type": "BlockStored", "future": {"nested": [1, 2, {"x": None}]}, "block_hashes": [1],
     "token_ids": list(range(16)), "block_size": 16, "medium": "NVME_OF", "lora_name": "adapter-x",
     "lora_id": 4, "extra_keys": [["adapter-x", "salt-z"]], "session_id": "s"},
    ["BlockStored", [2], 1, list(range(16)), 16, None, "GPU", None, None, 0, "full_attention",
     None, "local", "owned", "sess", "field-from-the-future", [1, 2]],
    ["BlockRemoved", [2], "GPU", 0, None, None, "more", "trailing"],
    {"type": "KVCacheResized", "blocks": 100},
], 0, "trailing-batch-field"])

# Groups a prefix router must ignore.
write("skipped_groups", [TS, [
    {"type": "BlockStored", "block_hashes": [1], "token_ids": list(range(16)), "block_size": 16,
     "group_idx": 1, "kv_cache_spec_kind": "sliding_window", "kv_cache_spec_sliding_window": 4096},
    ["BlockStored", [2], None, list(range(16)), 16, None, "GPU", None, None, 0, "mamba"],
    {"type": "BlockRemoved", "block_hashes": [3], "group_idx": 2},
    ["BlockStored", [4], None, list(range(16)), 16, None, "GPU", None, None, 0, "full_attention"],
]])

# A third-party vLLM-compatible engine, as seen on the wire: array events
# with parent_block_hash 0 for a root block, several blocks per
# BlockStored, token ids above 2**31 (a test-mode tokenizer), hashes above
# 2**63, and an adapter's blocks with lora_id and lora_name (the name also
# in every block's extra_keys, as vLLM puts it).
big = [2**31 + i for i in range(48)]
write("third_party_engine", [TS, [
    ["BlockStored", [2**63 + 1, 2**63 + 2, 2**64 - 3], 0, big, 16, None, "GPU", None, None],
    ["BlockStored", [2**63 + 4], 2**64 - 3, list(range(16)), 16, None, "GPU", None, None],
    ["BlockStored", [2**63 + 5, 2**63 + 6], 0, list(range(100, 132)), 16, 3, "GPU", "sql-adapter",
     [["sql-adapter"], ["sql-adapter"]]],
    ["BlockRemoved", [2**63 + 4], "GPU"],
], 0])

# The same engine's map form with the optional fields left out entirely:
# no parent_block_hash key for a root, no medium, no lora fields; lora_id
# alone on an adapter's root block (an engine that names adapters by id).
write("third_party_map_minimal", [TS, [
    {"type": "BlockStored", "block_hashes": [21], "token_ids": list(range(16)), "block_size": 16},
    {"type": "BlockStored", "block_hashes": [22], "token_ids": list(range(16, 32)), "block_size": 16,
     "lora_id": 7},
    {"type": "BlockRemoved", "block_hashes": [21]},
]])
