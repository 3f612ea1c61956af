#!/usr/bin/env bash
# chaos.sh: the fault probe suite. Runs each fault scenario against the
# switchyard binary (separate processes: a real nats-server, the frontend,
# simulated workers) through its end-to-end test, one at a time so the
# figures are not skewed by the others, and prints a table:
# scenario | result | figures (what the test measured and logged).
#
#   make chaos                        # builds bin/switchyard first
#   scripts/chaos.sh [NAME_REGEX]     # only the scenarios whose test matches
#   CHAOS_EXTRA='scenario|TestName' scripts/chaos.sh   # add scenarios
#
# Needs what the e2e tests need: nats-server on PATH (scripts/test-deps.sh).
# It is a measurement, not CI: CI runs the same tests in the e2e suite.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${SWITCHYARD_BIN:-$PWD/bin/switchyard}
if [[ ! -x $bin ]]; then
	echo "chaos: $bin not found; run make build (or make chaos)" >&2
	exit 2
fi
only=${1:-.}

# scenario | test
scenarios=(
	"NATS killed (SIGKILL) for 2 s under load|TestNATSBlip"
	"NATS killed for 15 s under load|TestNATSOutage"
	"NATS frozen (SIGSTOP) for 10 s under load|TestNATSFreeze"
	"JetStream disabled by a config reload for 10 s, core NATS up|TestJetStreamDisabled"
	"registry stream deleted under load|TestRegistryStreamDeleted"
	"one worker's bus link frozen 10 s, 6 streams on it|TestWorkerBusLinkFrozen"
	"worker frozen (SIGSTOP), default timeouts|TestWorkerFrozenSuspected"
	"worker frozen and another killed, --header-timeout 2s|TestWorkerFrozenAndKilled"
	"300 ping-only connections on a prefill worker's kvxfer port|TestKVXferPingFlood"
	"twelve 3.5M-token prompts (past max_model_len)|TestOversizedPromptsBounded"
	"bodies an engine would read otherwise, invalid UTF-8|TestBodiesReadTwoWays"
)

# More scenarios, e.g. another engineer's new fault test, without editing
# this list: CHAOS_EXTRA='scenario|TestName;scenario|TestName'.
if [[ -n ${CHAOS_EXTRA:-} ]]; then
	IFS=';' read -r -a extra <<<"$CHAOS_EXTRA"
	scenarios+=("${extra[@]}")
fi

log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
rows=()
failed=0
for s in "${scenarios[@]}"; do
	name=${s%%|*}
	test=${s##*|}
	[[ $test =~ $only ]] || continue
	echo "chaos: $test ($name)" >&2
	start=$(date +%s)
	if SWITCHYARD_BIN=$bin go test -count=1 -tags e2e -timeout 10m -v -run "^${test}\$" ./test/e2e/ >"$log/$test" 2>&1; then
		result=pass
	else
		result=FAIL
		failed=$((failed + 1))
	fi
	took=$(($(date +%s) - start))
	# The figures are the test's own log lines (file:line: text), without
	# the harness's process output and per-request failure lines.
	figures=$(grep -E '^ {4}[a-z_]+_test\.go:[0-9]+: ' "$log/$test" |
		grep -v -E '^ {4}harness_test\.go|failed at [0-9]|nats-server output|output of switchyard' |
		sed -E 's/^ {4}[a-z_]+_test\.go:[0-9]+: //' | head -n 6 | paste -sd ';' - | sed 's/;/; /g' || true)
	rows+=("$name|$result|${figures:-—} (${took} s)")
	if [[ $result == FAIL ]]; then
		echo "chaos: $test failed; its output:" >&2
		grep -v -E '^\s+\[[0-9]+\] ' "$log/$test" | tail -n 30 >&2
	fi
done

printf '| scenario | result | figures |\n|---|---|---|\n'
for r in "${rows[@]}"; do
	IFS='|' read -r name result figures <<<"$r"
	printf '| %s | %s | %s |\n' "$name" "$result" "$figures"
done
exit $((failed > 0))
