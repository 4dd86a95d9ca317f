#!/usr/bin/env bash
# Runs short GPU sweeps under compute-sanitizer and prints each tool's summary: memcheck,
# racecheck, synccheck and initcheck over every GPU backend and tactic (the Sm80Sanitize and
# Sm90Sanitize tests: dense 16-bit, fp8 cache and fp8 q, sparse with the three layouts, cluster
# shapes, each tactic), plus memcheck over corrupted block tables (CorruptBlockTable: page ids out
# of range are never read), the ops kernels (append, the indexer, the one-block, multi-block and
# cluster top-k; racecheck too for the multi-block and cluster ones and the indexer's kernels,
# synccheck for the cluster top-k and the indexer's) and the context-parallel merge. Sm90Sanitize skips itself off sm_90
# devices. Exits non-zero if any tool reports an error. Usage: scripts/sanitize.sh [build-dir]
# (default build-gpu; build it first, e.g. with
# scripts/device-build.sh). With SANITIZE_LOGS=dir, each tool's whole log is kept there.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
tests="$build/tests/mlakit_gpu_tests"
sanitize='Sm80Sanitize.*:Sm90Sanitize.*'
hostile='CorruptBlockTable.*:OpsGpu.AppendKvEqualsCpu:OpsGpu.TopkEqualsCpuEdges:OpsGpu.TopkMultiBlockGraphReplay:OpsGpu.TopkMultiBlockRising:OpsGpu.TopkSortPathGraphReplay:OpsGpu.TopkSortPathFallsBack:OpsGpu.TopkClusterGraphReplay:OpsGpu.TopkStreamGraphReplay:OpsGpu.IndexerLogitsEqualsCpu:CpMergeGpu.EqualsTheCpuReference'
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [[ ! -x "$tests" ]]; then
  echo "no $tests: build first" >&2
  exit 2
fi

status=0
# Each line: a compute-sanitizer tool and the gtest filter it runs.
while read -r tool filter; do
  log=$(mktemp)
  start=$SECONDS
  "$sanitizer" --tool "$tool" --error-exitcode 3 "$tests" --gtest_filter="$filter" \
    --gtest_brief=1 </dev/null >"$log" 2>&1
  rc=$?
  echo "== $tool $filter (exit $rc, $((SECONDS - start)) s)"
  [[ -n "${SANITIZE_LOGS:-}" ]] && mkdir -p "$SANITIZE_LOGS" && cp "$log" "$SANITIZE_LOGS/$tool.log"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Hazard|Invalid|PASSED|FAILED|SKIPPED" "$log" | head -20
  [[ $rc -eq 0 ]] || { status=1; tail -40 "$log"; }
  rm -f "$log"
done <<TOOLS
memcheck $sanitize:$hostile
racecheck $sanitize:OpsGpu.TopkMultiBlockGraphReplay:OpsGpu.TopkMultiBlockRising:OpsGpu.TopkSortPathGraphReplay:OpsGpu.TopkClusterGraphReplay:OpsGpu.TopkStreamGraphReplay:OpsGpu.IndexerLogitsEqualsCpu
synccheck $sanitize:OpsGpu.TopkClusterGraphReplay:OpsGpu.TopkStreamGraphReplay:OpsGpu.IndexerLogitsEqualsCpu
initcheck $sanitize
TOOLS
exit $status
