#!/bin/bash
# Compares `switchyard simulate --json` between two binaries on fixed configurations, byte for byte.
# Performance work on the simulation path must leave every output unchanged; this is the check.
#
# usage: scripts/simulate-golden.sh OLD_BIN NEW_BIN [OUTDIR]
#   OLD_BIN: a binary built from main before the change (e.g. git stash; make build; cp bin/switchyard /tmp/old)
#   NEW_BIN: the binary under test
# OUTDIR (default: a fresh temporary directory) may be reused across runs with the same OLD_BIN.
# Runs 14 configurations (16 and 1,000 workers, the latter also with --threads 2; kv, round-robin, least-loaded, random; disaggregation on
# 1 and 10 Gbit/s; host and disk KV offload; --router-alpha 0.7). Takes a few CPU-minutes. Exit 1 on any difference.
set -uo pipefail
old=${1:?usage: $0 OLD_BIN NEW_BIN [OUTDIR]}
new=${2:?usage: $0 OLD_BIN NEW_BIN [OUTDIR]}
out=${3:-$(mktemp -d)}
root=$(cd "$(dirname "$0")/.." && pwd)
trace=${TRACE:-$root/../shared/data/traces/mooncake_synthetic_trace.jsonl}
[ -r "$trace" ] || { echo "simulate-golden: trace $trace not readable (set TRACE=)"; exit 2; }
trace=$(realpath "$trace") # the report names it: the same path from every worktree
mkdir -p "$out"
common=(--trace "$trace" --model llama-3.1-8b --gpu h100)
configs=(
  "kv16|--workers 16 --router kv"
  "rr16|--workers 16 --router round-robin"
  "ll16|--workers 16 --router least-loaded"
  "rand16|--workers 16 --router random --seed 7"
  "alpha16|--workers 16 --router kv --router-alpha 0.7"
  "offload16|--workers 16 --router kv --kv-offload-gib 8 --kv-blocks 2000"
  "disk16|--workers 16 --router kv --kv-offload-gib 1 --kv-disk-gib 4 --kv-blocks 1500"
  "dis1g|--workers 8 --prefill-workers 1 --link-rate 1gbit --router kv"
  "dis10g|--workers 8 --prefill-workers 1 --link-rate 10gbit --router kv"
  "kv1000|--workers 1000 --router kv --tile 2 --time-scale 0.01348"
  "rr1000|--workers 1000 --router round-robin --tile 2 --time-scale 0.01348"
  "kv1000t|--workers 1000 --router kv --tile 2 --time-scale 0.01348 --threads 2"
  "ll1000|--workers 1000 --router least-loaded --max-requests 2000 --time-scale 0.01348"
  "alpha1000|--workers 1000 --router kv --router-alpha 0.7 --max-requests 2000 --time-scale 0.01348"
)
fail=0
for c in "${configs[@]}"; do
  name=${c%%|*}; args=${c#*|}
  # An OUTDIR kept from an earlier run against the same OLD_BIN keeps its outputs: they are not rerun.
  if [ ! -s "$out/$name.old.json" ]; then
    # shellcheck disable=SC2086
    "$old" simulate "${common[@]}" $args --json "$out/$name.old.json" >/dev/null 2>"$out/$name.old.err" || { echo "$name: old binary failed: $(tail -1 "$out/$name.old.err")"; rm -f "$out/$name.old.json"; fail=1; continue; }
  fi
  # shellcheck disable=SC2086
  "$new" simulate "${common[@]}" $args --json "$out/$name.new.json" >/dev/null 2>"$out/$name.new.err" || { echo "$name: new binary failed: $(tail -1 "$out/$name.new.err")"; fail=1; continue; }
  if cmp -s "$out/$name.old.json" "$out/$name.new.json"; then
    echo "$name: identical ($(wc -c <"$out/$name.new.json") bytes)"
  else
    echo "$name: DIFFERENT (diff $out/$name.old.json $out/$name.new.json)"; fail=1
  fi
done
exit $fail
