#!/usr/bin/env bash
# Runs short GPU sweeps of the sm80 and sm90 backends (the Sm80Sanitize and Sm90Sanitize tests)
# under compute-sanitizer and prints each tool's summary: memcheck and racecheck for both, and
# synccheck for sm90 (its warpgroup barriers). Sm90Sanitize skips itself off sm_90 devices. Exits
# non-zero if any tool reports an error. Usage: scripts/sanitize.sh [build-dir] (default
# build-gpu; build it first, e.g. with scripts/device-build.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
tests="$build/tests/mlakit_gpu_tests"
sm80='Sm80Sanitize.*'
sm90='Sm90Sanitize.*'
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [[ ! -x "$tests" ]]; then
  echo "no $tests: build first" >&2
  exit 2
fi

status=0
# Each line: a compute-sanitizer tool and the gtest filter it runs.
while read -r tool filter; do
  log=$(mktemp)
  "$sanitizer" --tool "$tool" --error-exitcode 3 "$tests" --gtest_filter="$filter" \
    --gtest_brief=1 </dev/null >"$log" 2>&1
  rc=$?
  echo "== $tool $filter (exit $rc)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Hazard|Invalid|PASSED|FAILED|SKIPPED" "$log" | head -20
  [[ $rc -eq 0 ]] || { status=1; tail -40 "$log"; }
  rm -f "$log"
done <<TOOLS
memcheck $sm80:$sm90
racecheck $sm80:$sm90
synccheck $sm90
TOOLS
exit $status
