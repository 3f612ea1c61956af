#!/usr/bin/python3
"""A stand-in vLLM engine for the libzmq interop test, with no GPU: real
libzmq sockets (Debian's python3-zmq) and msgpack (python3-msgpack) sending
KV events exactly in vLLM 0.26's layout, plus the HTTP endpoints a bridge
reads (/v1/models, /metrics, /health).

- PUB binds tcp://127.0.0.1:<free>; every message is [topic, seq (8 bytes
  big-endian, from 0), payload]; payload = [ts, [events], dp_rank] with
  events as maps whose first key is "type" and default fields omitted.
- A ROUTER binds the replay endpoint; a DEALER sends ["", seq8] and gets
  ["", topic, seq8, payload] per buffered batch with seq >= start, then
  ["", "", ff*8, ""].
- Block i of chain c holds tokens c*100000 + 16*i + j; hashes are the
  engine's own (a seeded sha256), as int for even chains and as 32-byte bin
  for odd ones; chain 1 carries cache_salt "tenant-b" in extra_keys.

With the argument "third-party" it speaks as a third-party vLLM-compatible
engine was seen to: events as tagged arrays [type, block_hashes,
parent_block_hash, token_ids, block_size, lora_id, medium, lora_name,
extra_keys] with parent_block_hash 0 for a root block, batches numbered
from 1, hashes as unsigned ints above 2**63 and token ids above 2**31.

It prints "engine: http=PORT pub=ENDPOINT replay=ENDPOINT" when ready, sends
CHAINS chains of BLOCKS blocks (half before the bridge can connect, so
replay must bring them, half live), then serves until killed.
"""
import hashlib
import http.server
import os
import struct
import sys
import threading
import time

import msgpack
import zmq

CHAINS, BLOCKS = 6, 4
SEED = os.urandom(8)  # like vLLM without PYTHONHASHSEED: differs per run
THIRD_PARTY = sys.argv[1:] == ["third-party"]
FIRST_SEQ = 1 if THIRD_PARTY else 0
TOKEN_BASE = 2**31 if THIRD_PARTY else 0


def engine_hash(c, i):
    return hashlib.sha256(SEED + struct.pack(">II", c, i)).digest()


def as_wire(c, d):
    return d if c % 2 else int.from_bytes(d[-8:], "big")


def chain_events(c):
    toks = [TOKEN_BASE + c * 100000 + t for t in range(BLOCKS * 16)]
    if THIRD_PARTY:
        hashes = [int.from_bytes(engine_hash(c, i)[-8:], "big") | 2**63 for i in range(BLOCKS)]
        extra = [["tenant-b"]] + [None] * (BLOCKS - 1) if c == 1 else None
        return [["BlockStored", hashes, 0, toks, 16, None, "GPU", None, extra]]
    ev = {"type": "BlockStored",
          "block_hashes": [as_wire(c, engine_hash(c, i)) for i in range(BLOCKS)],
          "parent_block_hash": None, "token_ids": toks, "block_size": 16, "medium": "GPU"}
    if c == 1:
        ev["extra_keys"] = [["tenant-b"]] + [None] * (BLOCKS - 1)
    return [ev]


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path == "/v1/models":
            body = b'{"object":"list","data":[{"id":"qwen3-0.6b","object":"model","max_model_len":40960}]}'
        elif self.path == "/metrics":
            body = (b'vllm:num_requests_running{engine="0"} 0.0\n'
                    b'vllm:num_requests_waiting{engine="0"} 0.0\n'
                    b'vllm:kv_cache_usage_perc{engine="0"} 0.0\n'
                    b'vllm:cache_config_info{block_size="16",num_gpu_blocks="4096"} 1.0\n'
                    b'process_start_time_seconds %d\n' % START)
        elif self.path == "/health":
            body = b""
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)


START = int(time.time())
ctx = zmq.Context()
pub = ctx.socket(zmq.PUB)
pub_port = pub.bind_to_random_port("tcp://127.0.0.1")
router = ctx.socket(zmq.ROUTER)
replay_port = router.bind_to_random_port("tcp://127.0.0.1")
httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=httpd.serve_forever, daemon=True).start()

ring, lock, topic = [], threading.Lock(), b""


def publish(events):
    with lock:
        seq = FIRST_SEQ + len(ring)
        payload = msgpack.packb([time.time(), events, 0], use_bin_type=True)
        ring.append((seq, payload))
        pub.send_multipart([topic, struct.pack(">Q", seq), payload])


def serve_replay():
    while True:
        ident, _, start = router.recv_multipart()
        (start,) = struct.unpack(">Q", start)
        with lock:
            batches = [b for b in ring if b[0] >= start]
        for seq, payload in batches:
            router.send_multipart([ident, b"", topic, struct.pack(">Q", seq), payload])
        router.send_multipart([ident, b"", b"", b"\xff" * 8, b""])


for c in range(CHAINS // 2):
    publish(chain_events(c))
threading.Thread(target=serve_replay, daemon=True).start()
print("engine: http=%d pub=tcp://127.0.0.1:%d replay=tcp://127.0.0.1:%d"
      % (httpd.server_address[1], pub_port, replay_port), flush=True)
# The live half waits for the go line on stdin: the bridge is up by then.
sys.stdin.readline()
for c in range(CHAINS // 2, CHAINS):
    publish(chain_events(c))
    time.sleep(0.05)
print("engine: published", flush=True)
sys.stdin.readline()  # until the test closes stdin or kills us
