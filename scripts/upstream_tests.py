#!/usr/bin/env python3
"""Runs FlashMLA's and FlashInfer's own MLA decode tests, unmodified, against mlakit's shims, and
writes a summary with counts (docs/python.md, "Upstream test suites").

The upstream test files are not part of this repository: export them first (from the projects'
repositories, into UPSTREAM/flashmla/tests/... and UPSTREAM/flashinfer/tests/...), then

    python3 scripts/upstream_tests.py UPSTREAM OUT [--suite NAME ...] [--scale F] [--collect-only]

Each suite runs in its own pytest process with the stand-in packages ``flash_mla`` and
``flashinfer`` (python/tests/upstream/standin) first on PYTHONPATH and the plugin
python/tests/upstream/mlakit_upstream_plugin.py loaded. mlakit itself must be installed in the
python3 that runs this (on the GPU machine: ``MLAKIT_CUDA_ARCHITECTURES=90a MLAKIT_VENV=system
python/run_tests.sh --offline -m gpu``). Needs pytest and PyTorch; no network, no FlashMLA or
FlashInfer installed.

Each suite keeps a deterministic sample of its cases (every test function represented) and has
a time budget, after which its remaining cases are reported as not run: together about five
minutes of testing on an H100. ``--scale`` multiplies both; ``--scale 0`` runs everything.

OUT receives five files: summary.md (the table, printed last too), summary.json, junit.xml (one
<testsuite> per suite), cases.jsonl (one line per case: suite, node id, outcome, reason,
seconds) and log.txt (pytest's output).
"""

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from typing import Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join(REPO, "python", "tests", "upstream")

# Outcomes in the order the table shows them.
OUTCOMES = ["passed", "failed", "error", "refused", "skipped", "xfailed", "xpassed", "not_run"]
HEADERS = {
    "passed": "passed",
    "failed": "failed",
    "error": "errors",
    "refused": "refused by mlakit",
    "skipped": "skipped by the test",
    "xfailed": "known difference",
    "xpassed": "known difference passed",
    "not_run": "not run (budget)",
}
LOG_LIMIT = 12 << 20  # bytes of log.txt kept (the head and the tail)


@dataclasses.dataclass
class Suite:
    name: str
    project: str  # folder under UPSTREAM
    files: List[str]
    sample: int  # cases kept (0: all)
    budget: float  # seconds of testing
    what: str


# Samples and budgets: cases take ~0.02-0.3 s each on an H100 (data generation and the
# references dominate; refused cases stop at the call), so each sample is meant to finish inside
# its budget, which only guards the total.
SUITES = [
    Suite("flashmla-dense", "flashmla", ["tests/test_flash_mla_dense_decoding.py"], 900, 60,
          "FlashMLA dense decoding (test_flash_mla_dense_decoding.py)"),
    Suite("flashmla-sparse", "flashmla", ["tests/test_flash_mla_sparse_decoding.py"], 260, 90,
          "FlashMLA sparse decoding (test_flash_mla_sparse_decoding.py)"),
    Suite("flashinfer-trtllm", "flashinfer", ["tests/attention/test_trtllm_gen_mla.py"], 700, 80,
          "FlashInfer trtllm-gen MLA decode (test_trtllm_gen_mla.py)"),
    Suite("flashinfer-wrapper", "flashinfer", ["tests/attention/test_deepseek_mla.py"], 900, 70,
          "FlashInfer BatchMLAPagedAttentionWrapper (test_deepseek_mla.py)"),
]  # fmt: skip


def has_module(name: str) -> bool:
    probe = [sys.executable, "-c",
             f"import importlib.util as u; exit(u.find_spec({name!r}) is None)"]  # fmt: skip
    return subprocess.run(probe, capture_output=True).returncode == 0


def run_suite(suite: Suite, args: argparse.Namespace, work: str, log) -> Dict:
    root = os.path.join(os.path.abspath(args.upstream), suite.project)
    missing = [f for f in suite.files if not os.path.isfile(os.path.join(root, f))]
    if missing:
        return {"error": f"not exported: {', '.join(os.path.join(root, f) for f in missing)}"}
    scale = args.scale
    sample = 0 if scale == 0 else max(1, int(round(suite.sample * scale)))
    budget = 0 if scale == 0 else suite.budget * scale
    cases = os.path.join(work, suite.name + ".jsonl")
    junit = os.path.join(work, suite.name + ".xml")
    command = [
        sys.executable, "-m", "pytest", *suite.files,
        "-p", "mlakit_upstream_plugin", "-p", "no:cacheprovider",
        "-c", os.devnull, "--rootdir", root, "-q", "-rfE", "--tb=short",
        "-W", "ignore::pytest.PytestCollectionWarning",
        "--junitxml", junit, "-o", f"junit_suite_name={suite.name}",
        "--mlakit-summary", cases, "--mlakit-sample", str(sample),
        "--mlakit-budget", str(budget),
    ]  # fmt: skip
    if args.collect_only:
        command.append("--collect-only")
    elif has_module("pytest_timeout"):  # loaded by its entry point: a hung case fails, alone
        command += ["--timeout", "300"]
    env = dict(os.environ)
    paths = [os.path.join(HARNESS, "standin"), HARNESS, root]
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    env["PYTHONUNBUFFERED"] = "1"
    print(f"== {suite.name}: {suite.what}", flush=True)
    log.write(f"\n== {suite.name}: {' '.join(command)}\n")
    log.flush()
    start = time.monotonic()
    limit = None if budget == 0 else budget + 300  # collection, start-up, one slow case
    try:
        done = subprocess.run(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                              timeout=limit)  # fmt: skip
        status = done.returncode
    except subprocess.TimeoutExpired:
        status = "killed after its time limit"
    seconds = round(time.monotonic() - start, 1)
    summary_path = cases + ".summary.json"
    if not os.path.isfile(summary_path):
        return {"error": f"pytest exit status {status}: no summary (see log.txt)",
                "seconds": seconds}  # fmt: skip
    with open(summary_path) as f:
        summary = json.load(f)
    summary.update(exitstatus=status, wall_seconds=seconds, sample=sample, budget=budget)
    return summary


def merge_junit(work: str, names: List[str], path: str) -> None:
    merged = ElementTree.Element("testsuites")
    for name in names:
        part = os.path.join(work, name + ".xml")
        if os.path.isfile(part):
            root = ElementTree.parse(part).getroot()
            suites = [root] if root.tag == "testsuite" else list(root)
            for suite in suites:
                suite.set("name", name)
                merged.append(suite)
    ElementTree.ElementTree(merged).write(path, encoding="utf-8", xml_declaration=True)


def merge_cases(work: str, names: List[str], path: str) -> None:
    with open(path, "w") as out:
        for name in names:
            part = os.path.join(work, name + ".jsonl")
            if not os.path.isfile(part):
                continue
            with open(part) as f:
                for line in f:
                    record = json.loads(line)
                    out.write(json.dumps({"suite": name, **record}) + "\n")


def trim_log(path: str) -> None:
    size = os.path.getsize(path)
    if size <= LOG_LIMIT:
        return
    with open(path, "rb") as f:
        head = f.read(LOG_LIMIT // 6)
        f.seek(size - (LOG_LIMIT - len(head)))
        tail = f.read()
    with open(path, "wb") as f:
        f.write(head + f"\n[... {size - len(head) - len(tail)} bytes cut ...]\n".encode() + tail)


def table(results: Dict[str, Dict]) -> str:
    cols = ["suite", "collected", "run"] + [HEADERS[o] for o in OUTCOMES] + ["seconds"]
    rows = []
    for name, s in results.items():
        if "error" in s:
            rows.append([name, "-", "-"] + ["-"] * len(OUTCOMES) + [str(s.get("seconds", "-"))])
            continue
        outcomes = s.get("outcomes", {})
        rows.append([name, str(s["collected"]), str(s["selected"])]
                    + [str(outcomes.get(o, 0)) for o in OUTCOMES]
                    + [str(s.get("wall_seconds", ""))])  # fmt: skip
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    line = lambda cells: "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths)) + " |"
    out = [line(cols), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    return "\n".join(out + [line(r) for r in rows])


def budget_text(seconds: float) -> str:
    return f"{seconds:.4g} s" if seconds else "none"


def markdown(results: Dict[str, Dict], suites: List[Suite]) -> str:
    what = {s.name: s.what for s in suites}
    parts = ["# Upstream MLA decode tests against mlakit's shims", "", table(results), ""]
    for name, s in results.items():
        parts += [f"## {name}: {what[name]}", ""]
        if "error" in s:
            parts += [f"Not run: {s['error']}", ""]
            continue
        parts.append(f"Collected {s['collected']} cases, ran {s['selected']} "
                     f"(sample {s['sample'] or 'all'}, budget {budget_text(s['budget'])}), "
                     f"pytest exit status {s['exitstatus']}, {s['wall_seconds']} s.")  # fmt: skip
        parts += [f"- {note}" for note in s.get("notes", [])] + [""]
        for outcome in OUTCOMES:
            reasons = s.get("reasons", {}).get(outcome)
            if not reasons:
                continue
            parts += [f"{HEADERS[outcome]} ({sum(reasons.values())}):", ""]
            parts += [f"- {count} x {reason or '(no message)'}"
                      for reason, count in reasons.items()]  # fmt: skip
            parts.append("")
        parts += ["Cases by test function (collected / run):", ""]
        for group, count in sorted(s["collected_by_group"].items()):
            parts.append(f"- {group}: {count} / {s['selected_by_group'].get(group, 0)}")
        parts.append("")
    return "\n".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("upstream", help="folder holding flashmla/tests and flashinfer/tests")
    parser.add_argument("out", help="folder for the summary, junit.xml, cases.jsonl, log.txt")
    parser.add_argument("--suite", action="append", choices=[s.name for s in SUITES],
                        help="run this suite (repeatable; default: all)")  # fmt: skip
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiplies every sample and budget; 0 runs every case")  # fmt: skip
    parser.add_argument("--collect-only", action="store_true", help="count the cases, run none")
    args = parser.parse_args()
    suites = [s for s in SUITES if not args.suite or s.name in args.suite]
    os.makedirs(args.out, exist_ok=True)
    results: Dict[str, Dict] = {}
    log_path = os.path.join(args.out, "log.txt")
    with tempfile.TemporaryDirectory() as work, open(log_path, "w") as log:
        for suite in suites:
            results[suite.name] = run_suite(suite, args, work, log)
        names = [s.name for s in suites]
        merge_junit(work, names, os.path.join(args.out, "junit.xml"))
        merge_cases(work, names, os.path.join(args.out, "cases.jsonl"))
    trim_log(log_path)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(markdown(results, suites))
    print(f"\nDetails: {os.path.join(args.out, 'summary.md')}\n")
    print(table(results))
    failed = any("error" in s or s.get("outcomes", {}).get("failed") or
                 s.get("outcomes", {}).get("error") for s in results.values())  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
