#!/usr/bin/env python3
"""Runs FlashMLA's and FlashInfer's own MLA decode tests, unmodified, against mlakit's shims, and
writes a summary with counts (docs/python.md, "Upstream test suites").

The upstream test files are not part of this repository: export them first (from the projects'
repositories, into UPSTREAM/flashmla/tests/... and UPSTREAM/flashinfer/tests/...), then

    python3 scripts/upstream_tests.py UPSTREAM OUT [--suite NAME ...] [--scale F] [--jobs N]
                                      [--collect-only]

Each suite runs in its own pytest process with the stand-in packages ``flash_mla`` and
``flashinfer`` (python/tests/upstream/standin) first on PYTHONPATH and the plugin
python/tests/upstream/mlakit_upstream_plugin.py loaded. mlakit itself must be installed in the
python3 that runs this (on the GPU machine: ``MLAKIT_CUDA_ARCHITECTURES=90a MLAKIT_VENV=system
python/run_tests.sh --offline -m gpu``). Needs pytest and PyTorch; no network, no FlashMLA or
FlashInfer installed.

Each suite keeps a deterministic sample of its cases (every test function represented) and has
a time budget, after which its remaining cases are reported as not run: together about five
minutes of testing on an H100. ``--scale`` multiplies both; ``--scale 0`` runs everything.

``--jobs N`` runs N pytest processes per suite at once, each with a shard of the same selection
(the plugin's --mlakit-shard: dealt round-robin within each test function, so the slow ones are
spread). The budget holds for each process, so it still bounds the suite's wall time. With
several GPUs visible the processes take one each in turn; with one they share it. Cases that then
fail by running out of GPU memory (the tests' own allocations: several processes on a GPU) are
rerun with a quarter of the processes, then with one; the table counts each case's last run
(summary.json: `final_outcomes`, and `retries` with each round's counts).

OUT receives five files: summary.md (the table, printed last too), summary.json, junit.xml (one
<testsuite> per suite, its shards merged), cases.jsonl (one line per case: suite, node id,
outcome, reason, seconds; a rerun's line marked `retry`) and log.txt (pytest's output, shard after shard).
"""

import argparse
import collections
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


def visible_gpus() -> List[str]:
    """The GPUs a child process may be given through CUDA_VISIBLE_DEVICES: those it names, else
    those nvidia-smi lists (none without one)."""
    named = os.environ.get("CUDA_VISIBLE_DEVICES")
    if named is not None:
        return [d.strip() for d in named.split(",") if d.strip()]
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    except OSError:
        return []
    return [str(i) for i in range(sum(ln.startswith("GPU ") for ln in listing.splitlines()))]


def run_suite(suite: Suite, args: argparse.Namespace, work: str, log, retry: bool = True) -> Dict:
    root = os.path.join(os.path.abspath(args.upstream), suite.project)
    missing = [f for f in suite.files if not os.path.isfile(os.path.join(root, f))]
    if missing:
        return {"error": f"not exported: {', '.join(os.path.join(root, f) for f in missing)}"}
    scale = args.scale
    sample = 0 if scale == 0 else max(1, int(round(suite.sample * scale)))
    # The budget bounds each process's testing, so the suite's wall time: with --jobs the same
    # sample finishes sooner, and the budget still only guards it.
    budget = 0 if scale == 0 else suite.budget * scale
    command = [
        sys.executable, "-m", "pytest", *suite.files,
        "-p", "mlakit_upstream_plugin", "-p", "no:cacheprovider",
        "-c", os.devnull, "--rootdir", root, "-q", "-rfE", "--tb=short",
        "-W", "ignore::pytest.PytestCollectionWarning",
        "-o", f"junit_suite_name={suite.name}",
        "--mlakit-sample", str(sample), "--mlakit-budget", str(budget),
    ]  # fmt: skip
    if getattr(args, "only", None):
        command += ["--mlakit-only", os.path.abspath(args.only)]
    if args.collect_only:
        command.append("--collect-only")
    elif has_module("pytest_timeout"):  # loaded by its entry point: a hung case fails, alone
        command += ["--timeout", "300"]
    env = dict(os.environ)
    paths = [os.path.join(HARNESS, "standin"), HARNESS, root]
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    env["PYTHONUNBUFFERED"] = "1"
    jobs = args.jobs
    gpus = visible_gpus() if jobs > 1 else []
    if jobs > 1:  # shared out, where the caller has not said otherwise: the cores, ...
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // jobs)))
        # ... and a GPU's memory: FlashInfer's tests empty PyTorch's cache once a process holds
        # more than this fraction of it (its default, 0.9, is for a GPU of one's own).
        per_gpu = -(-jobs // max(1, len(gpus)))
        env.setdefault("FLASHINFER_TEST_MEMORY_THRESHOLD", f"{0.9 / per_gpu:.3g}")
    print(f"== {suite.name}: {suite.what}" + (f" ({jobs} processes)" if jobs > 1 else ""),
          flush=True)  # fmt: skip
    start = time.monotonic()
    shards = []
    for k in range(jobs):
        part = os.path.join(work, f"{suite.name}.{k}")
        shard_env = dict(env)
        if len(gpus) > 1:
            shard_env["CUDA_VISIBLE_DEVICES"] = gpus[k % len(gpus)]
        shard_command = command + ["--junitxml", part + ".xml", "--mlakit-summary", part + ".jsonl",
                                   "--mlakit-shard", f"{k}/{jobs}"]  # fmt: skip
        where = f"shard {k}/{jobs}" + (f", GPU {gpus[k % len(gpus)]}" if len(gpus) > 1 else "")
        header = f"\n== {suite.name}" + (f" ({where})" if jobs > 1 else "")
        # One process writes into log.txt as it goes; several each into a part, copied after.
        out = log if jobs == 1 else open(part + ".log", "w")
        out.write(f"{header}: {' '.join(shard_command)}\n")
        out.flush()
        child = subprocess.Popen(shard_command, cwd=root, env=shard_env, stdout=out,
                                 stderr=subprocess.STDOUT)  # fmt: skip
        shards.append((part, out, child))
    limit = None if budget == 0 else budget + 300  # collection, start-up, one slow case
    statuses = []
    for part, out, child in shards:
        try:
            left = None if limit is None else max(0.0, start + limit - time.monotonic())
            statuses.append(child.wait(timeout=left))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            statuses.append("killed after its time limit")
        if out is not log:
            out.close()
            with open(part + ".log") as f:
                log.write(f.read())
            log.flush()
    seconds = round(time.monotonic() - start, 1)
    parts = []
    for (part, _, _), status in zip(shards, statuses):
        if not os.path.isfile(part + ".jsonl.summary.json"):
            shard = f"shard {part.rsplit('.', 1)[1]}: " if jobs > 1 else ""
            return {"error": f"{shard}pytest exit status {status}: no summary (see log.txt)",
                    "seconds": seconds}  # fmt: skip
        with open(part + ".jsonl.summary.json") as f:
            parts.append(dict(json.load(f), exitstatus=status))
    summary = merge_summaries(parts)
    if "error" in summary:
        summary["seconds"] = seconds
    else:
        summary.update(wall_seconds=seconds, sample=sample, budget=budget, jobs=jobs)
        if jobs > 1:
            summary["notes"].append(
                f"run as {jobs} pytest processes at once, each with a shard of the selection "
                "(dealt round-robin within each test function)"
                + (f" and the budget of {budget_text(budget)}" if budget else "")
                + (f", on {len(gpus)} GPUs in turn" if len(gpus) > 1 else ""))  # fmt: skip
        if retry and jobs > 1 and not args.collect_only:
            summary = retry_out_of_memory(suite, args, work, log, summary)
    return summary


OOM = "OutOfMemoryError"


def out_of_memory_cases(work: str, name: str, jobs: int) -> Dict[str, str]:
    """The outcome ("failed" or "error") of each of a run's cases, by node id, that ran out of GPU
    memory (the tests' own allocations, when several processes share a GPU)."""
    cases = {}
    for k in range(jobs):
        path = os.path.join(work, f"{name}.{k}.jsonl")
        if not os.path.isfile(path):
            continue
        with open(path) as f:
            for line in f:
                record = json.loads(line)
                if record["outcome"] in ("failed", "error") and OOM in record.get("reason", ""):
                    cases[record["nodeid"]] = record["outcome"]
    return cases


def retry_out_of_memory(suite: Suite, args: argparse.Namespace, work: str, log,
                        summary: Dict) -> Dict:
    """Reruns the cases that ran out of GPU memory with fewer processes (a quarter, then one),
    in work/retry<n>/. The summary gets `retries` (each round's jobs, cases and outcomes) and
    `final_outcomes`: the outcomes with those failures replaced by the retries' results."""
    final = collections.Counter(summary["outcomes"])
    retries = []
    source, jobs = work, args.jobs
    while True:
        oom = out_of_memory_cases(source, suite.name, jobs)
        if not oom or jobs == 1 and retries:
            break
        jobs = 1 if jobs <= 4 else jobs // 4
        round_dir = os.path.join(work, f"retry{len(retries) + 1}")
        os.makedirs(round_dir, exist_ok=True)
        only = os.path.join(round_dir, "only.txt")
        with open(only, "w") as f:
            f.write("".join(f"{i}\n" for i in oom))
        retry_args = argparse.Namespace(**dict(vars(args), only=only, jobs=jobs, scale=0.0))
        log.write(f"\n== {suite.name}: {len(oom)} cases out of GPU memory, rerun with {jobs} "
                  f"process{'es' if jobs > 1 else ''}\n")  # fmt: skip
        result = run_suite(suite, retry_args, round_dir, log, retry=False)
        if "error" in result:
            retries.append({"jobs": jobs, "cases": len(oom), "error": result["error"]})
            break
        final.subtract(collections.Counter(oom.values()))  # their last run's outcome, replaced
        final.update(result["outcomes"])
        retries.append({"jobs": jobs, "cases": len(oom), "outcomes": result["outcomes"],
                        "dir": os.path.basename(round_dir)})  # fmt: skip
        source = round_dir
    if retries:
        summary = dict(summary, retries=retries, final_outcomes=dict(+final))
    return summary


def merge_summaries(parts: List[Dict]) -> Dict:
    """The plugin's summaries of the shards of one suite as one. Every shard collected the
    suite and drew the same selection (its hash shows it), then ran its share."""
    first = parts[0]
    if any(p["selection"] != first["selection"] for p in parts):
        return {"error": "the shards drew different selections: collection is not deterministic "
                         f"({', '.join(sorted(set(p['selection'] for p in parts)))})"}  # fmt: skip
    selected: collections.Counter = collections.Counter()
    outcomes: collections.Counter = collections.Counter()
    reasons: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for p in parts:
        selected.update(p["selected_by_group"])
        outcomes.update(p["outcomes"])
        for outcome, counts in p["reasons"].items():
            reasons[outcome].update(counts)
    # Of several shards, one left without a case exits 5 (no tests): not a failure of the suite.
    statuses = [p["exitstatus"] for p in parts
                if len(parts) == 1 or p["selected"] or p["exitstatus"] != 5]  # fmt: skip
    merged = dict(
        first,
        selected=sum(selected.values()),
        selected_by_group=dict(selected),
        outcomes=dict(outcomes),
        reasons={k: dict(v.most_common()) for k, v in reasons.items()},
        notes=list(first["notes"]),
        exitstatus=next((s for s in statuses if s != 0), 0),
        seconds=max(p["seconds"] for p in parts),
    )
    if len(parts) > 1:  # each shard's seconds of testing: how well the cases were spread
        merged["seconds_by_shard"] = [p["seconds"] for p in parts]
    return merged


def merge_junit(work: str, parts: Dict[str, List[str]], path: str) -> None:
    """One <testsuite> per suite, named after it, from its shards' junit files."""
    merged = ElementTree.Element("testsuites")
    for name, names in parts.items():
        into = None
        for part in names:
            if not os.path.isfile(os.path.join(work, part + ".xml")):
                continue
            root = ElementTree.parse(os.path.join(work, part + ".xml")).getroot()
            for suite in [root] if root.tag == "testsuite" else list(root):
                if into is None:
                    into = suite
                    into.set("name", name)
                    merged.append(into)
                    continue
                into.extend(list(suite))
                for key in ("tests", "errors", "failures", "skipped"):
                    into.set(key, str(int(into.get(key, 0)) + int(suite.get(key, 0))))
                into.set("time", str(max(float(into.get("time", 0)), float(suite.get("time", 0)))))
    ElementTree.ElementTree(merged).write(path, encoding="utf-8", xml_declaration=True)


def merge_cases(work: str, parts: Dict[str, List[str]], path: str) -> None:
    """Every case's line; a case rerun after running out of GPU memory has a line per run, the
    reruns marked `retry` (1, 2)."""
    with open(path, "w") as out:
        for name in parts:
            rounds = [(work, 0)] + [(os.path.join(work, d), int(d[5:])) for d in
                                    sorted(os.listdir(work)) if d.startswith("retry")]  # fmt: skip
            for where, retry in rounds:
                for part in sorted(os.listdir(where)):
                    if not (part.startswith(name + ".") and part.endswith(".jsonl")):
                        continue
                    with open(os.path.join(where, part)) as f:
                        for line in f:
                            record = dict({"suite": name}, **json.loads(line))
                            if retry:
                                record["retry"] = retry
                            out.write(json.dumps(record) + "\n")


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
        outcomes = s.get("final_outcomes", s.get("outcomes", {}))
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
        per = " per process" if s.get("jobs", 1) > 1 and s["budget"] else ""
        parts.append(f"Collected {s['collected']} cases, ran {s['selected']} "
                     f"(sample {s['sample'] or 'all'}, budget {budget_text(s['budget'])}{per}), "
                     f"pytest exit status {s['exitstatus']}, {s['wall_seconds']} s.")  # fmt: skip
        parts += [f"- {note}" for note in s.get("notes", [])] + [""]
        for r in s.get("retries", []):
            said = r.get("error") or ", ".join(f"{HEADERS[o]} {n}" for o, n in r["outcomes"].items())
            parts += [f"Rerun with {r['jobs']} process{'es' if r['jobs'] > 1 else ''}: the "
                      f"{r['cases']} cases that ran out of GPU memory: {said}."]  # fmt: skip
        if s.get("retries"):
            parts += ["The table counts each case's last run; the reasons below are the first "
                      "run's.", ""]  # fmt: skip
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
    parser.add_argument("--only", metavar="FILE",
                        help="run only the node ids listed in FILE (one a line, after an optional "
                             "'suite<TAB>', as failed_cases.txt of a record lists them)")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1,
                        help="pytest processes per suite at once, each with a shard of its cases "
                        "(several GPUs: one each in turn); default 1")  # fmt: skip
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error("--jobs must be 1 or more")
    suites = [s for s in SUITES if not args.suite or s.name in args.suite]
    os.makedirs(args.out, exist_ok=True)
    results: Dict[str, Dict] = {}
    log_path = os.path.join(args.out, "log.txt")
    with tempfile.TemporaryDirectory() as work, open(log_path, "w") as log:
        for suite in suites:
            results[suite.name] = run_suite(suite, args, work, log)
        parts = {s.name: [f"{s.name}.{k}" for k in range(args.jobs)] for s in suites}
        merge_junit(work, parts, os.path.join(args.out, "junit.xml"))
        merge_cases(work, parts, os.path.join(args.out, "cases.jsonl"))
    trim_log(log_path)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(markdown(results, suites))
    print(f"\nDetails: {os.path.join(args.out, 'summary.md')}\n")
    print(table(results))
    last = {name: s.get("final_outcomes", s.get("outcomes", {})) for name, s in results.items()}
    failed = any("error" in s or last[name].get("failed") or last[name].get("error")
                 for name, s in results.items())  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
