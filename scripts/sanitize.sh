#!/usr/bin/env bash
# Runs a short GPU sweep of the sm80 backend (the Sm80Sanitize tests) under compute-sanitizer's
# memcheck and racecheck tools and prints both summaries. Exits non-zero if either reports an
# error. Usage: scripts/sanitize.sh [build-dir] (default build-gpu; build it first, e.g. with
# scripts/device-build.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
tests="$build/tests/mlakit_gpu_tests"
filter='Sm80Sanitize.*'
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [[ ! -x "$tests" ]]; then
  echo "no $tests: build first" >&2
  exit 2
fi

status=0
for tool in memcheck racecheck; do
  log=$(mktemp)
  "$sanitizer" --tool "$tool" --error-exitcode 3 "$tests" --gtest_filter="$filter" \
    --gtest_brief=1 >"$log" 2>&1
  rc=$?
  echo "== $tool (exit $rc)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Hazard|Invalid|PASSED|FAILED|SKIPPED" "$log" | head -20
  [[ $rc -eq 0 ]] || { status=1; tail -40 "$log"; }
  rm -f "$log"
done
exit $status
