#!/usr/bin/env bash
# The real-broker leg of the tests (make test-real): starts the KubeMQ that
# ../shared/kubemq builds, runs against it every test that takes
# KUBEMQ_ADDRESS, and stops it by its pid, also when a test fails or the
# script is interrupted. Where ../shared/kubemq is absent (a user's clone)
# it says so and exits 0: the leg is skipped, not failed.
#
# The broker listens on its own ports (KUBEMQ_TEST_GRPC_PORT, default
# 50500, and the two after 9590 and 8599), so that a broker a developer
# runs on 50000 is left alone. Each suite prints its test counts and time;
# the script fails when any suite fails, after running them all.
set -euo pipefail
cd "$(dirname "$0")/.."

kubemq=../shared/kubemq
if [ ! -x "$kubemq/start.sh" ]; then
	echo "test-real: skipped: no $kubemq/start.sh (the real-broker leg runs where ../shared/kubemq holds a KubeMQ source tree)"
	exit 0
fi

GO=${GO:-go}
port=${KUBEMQ_TEST_GRPC_PORT:-50500}
log_dir=$(mktemp -d "${TMPDIR:-/tmp}/inferq-test-real.XXXXXX")

leg_start=$(date +%s)
echo "test-real: building and starting KubeMQ on 127.0.0.1:$port"
started=$(GRPC_PORT=$port REST_PORT=$((port - 50500 + 9590)) API_PORT=$((port - 50500 + 8599)) "$kubemq/start.sh")
read -r pid store <<<"$started"
stop() {
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
	kill -9 "$pid" 2>/dev/null || true
	rm -rf "$store" "$log_dir"
}
trap stop EXIT
trap 'exit 130' INT TERM
echo "test-real: KubeMQ pid $pid, store $store, started in $(($(date +%s) - leg_start)) s"
export KUBEMQ_ADDRESS=127.0.0.1:$port

# tests_calling PATTERN FILE...: the top-level tests whose body calls
# PATTERN (a helper that adds the real-broker leg), as a -run expression.
tests_calling() {
	local pat=$1
	shift
	local names
	names=$(awk -v pat="$pat" '
		/^func / { name = "" }
		/^func Test[A-Za-z0-9_]*\(t \*testing\.T\)/ { match($0, /Test[A-Za-z0-9_]*/); name = substr($0, RSTART, RLENGTH) }
		name != "" && $0 ~ pat { print name }' "$@" | sort -u | paste -sd'|')
	[ -n "$names" ] || { echo "test-real: no test calls $pat in $*" >&2; exit 1; }
	echo "^($names)\$"
}

failed=()
# suite NAME PACKAGE RUN: runs the tests RUN of PACKAGE, prints their
# counts and time, and the tests it skipped.
suite() {
	local name=$1 pkg=$2 run=$3 t0 rc=0 out
	out="$log_dir/$name.log"
	t0=$(date +%s)
	"$GO" test -count=1 -timeout 20m -v -run "$run" "$pkg" >"$out" 2>&1 || rc=$?
	local pass fail skip
	pass=$(grep -c -E '^\s*--- PASS' "$out" || true)
	fail=$(grep -c -E '^\s*--- FAIL' "$out" || true)
	skip=$(grep -c -E '^\s*--- SKIP' "$out" || true)
	printf 'test-real: %-12s %-18s %3d passed %2d failed %2d skipped (tests and subtests) in %4d s\n' \
		"$name" "$pkg" "$pass" "$fail" "$skip" "$(($(date +%s) - t0))"
	if [ "$skip" -gt 0 ]; then
		grep -E '^\s*--- SKIP' "$out" | sed -E 's/^\s*--- SKIP: /test-real:   skipped: /' | head -10
	fi
	if [ "$rc" -ne 0 ]; then
		failed+=("$name")
		grep -E -B2 -A20 '^\s*--- FAIL|^panic:|^FAIL' "$out" | head -200
	fi
}

suite conformance ./broker/ "$(tests_calling . broker/conformance_*_test.go)"
suite mq ./mq/ "$(tests_calling 'targets\\(' mq/*_test.go)"
suite consumer ./consumer/ "$(tests_calling 'forBrokers\\(' consumer/*_test.go)"
suite scaler ./scaler/ '^TestAcceptance$'
suite fleet-crash ./cmd/inferq/ '^TestFleetCrashBudget$'
suite chaos ./chaos/ '^TestChaos$'

echo "test-real: the real-broker leg took $(($(date +%s) - leg_start)) s"
if [ "${#failed[@]}" -gt 0 ]; then
	echo "test-real: FAILED: ${failed[*]}"
	exit 1
fi
echo "test-real: every suite passed on KubeMQ"
