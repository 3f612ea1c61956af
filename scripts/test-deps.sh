#!/usr/bin/env bash
# test-deps.sh: make sure the outside components the tests use are here.
#
# The end-to-end tests drive real outside programs: an external nats-server
# (NATS outage tests), libzmq through python3-zmq and python3-msgpack (the
# vLLM wire interop test), headless Chromium (the dashboard test), and
# Node.js with npm (the openai client and the tokenizer oracle). As root on
# Debian this installs whatever is missing; otherwise it names what is
# missing and how to get it, and fails: the tests never skip.
set -euo pipefail

# The tests read traces, timing tables and tokenizer files from shared/data
# beside the checkout (../shared/data from the repository root), which is
# not in the repository. Without it a dozen tests in five packages fail
# minutes into the run, each on a missing file; say so first.
data="$(cd "$(dirname "$0")/.." && pwd)/../shared/data"
if [ ! -d "$data/traces" ]; then
  echo "test-deps: the tests need the shared data at $data (traces, timing tables, tokenizer files), and it is not there: put the checkout beside shared/ (clone into the directory that holds shared/, or link shared/ next to the checkout)" >&2
  exit 1
fi
[ "${1:-}" = --data-only ] && exit 0

missing=()
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
command -v nats-server >/dev/null || missing+=(nats-server)
{ [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import zmq' 2>/dev/null; } || missing+=(python3 python3-zmq)
{ [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import msgpack' 2>/dev/null; } || missing+=(python3-msgpack)
command -v chromium >/dev/null || missing+=(chromium)
if [ "${1:-}" = --with-linkbench ]; then
  command -v tc >/dev/null || missing+=(iproute2)
  command -v curl >/dev/null || missing+=(curl)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "test-deps: installing ${missing[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
  exit 0
fi
echo "test-deps: the tests need ${missing[*]}; install them (Debian: sudo apt-get install ${missing[*]}, or sudo scripts/test-deps.sh) and run make test again" >&2
exit 1
