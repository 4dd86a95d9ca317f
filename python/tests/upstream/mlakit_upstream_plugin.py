"""pytest plugin that runs FlashMLA's and FlashInfer's own MLA decode tests, unmodified, against
mlakit's shims (the stand-in packages in ``standin/`` beside this file, first on PYTHONPATH).
scripts/upstream_tests.py loads it with ``-p mlakit_upstream_plugin``; see docs/python.md.

What it adds to a plain pytest run of the upstream files:

* FlashMLA's decoding tests are scripts: ``test_flash_mla(t)`` / ``test_flash_mla(p)`` are called
  by ``main()`` over a list of cases. The plugin parametrizes them with exactly that list (the
  dense test's by running its ``main()`` with the test function replaced by a recorder, the
  sparse test's from its ``gen_testcase()``), applies ``main()``'s settings (default device
  cuda:0, default dtype, and the sparse test's float32 matmul precision) around each module, and
  fails a sparse case whose returned ``Result.is_correct`` is False, as ``main()`` does.
  Performance cases run as correctness cases: their timing looks FlashMLA's kernels up by name in
  a profile (``flash_fwd_splitkv_mla_kernel``), which mlakit's are not called.
* A case that raises NotImplementedError from mlakit (a shim or the library refusing a feature
  it does not claim, by name) is reported as skipped with ``mlakit refuses: <message>``.
* ``flashinfer.utils`` reports every FlashInfer backend as available (see its docstring): the
  plugin sets the reported capability per case.
* ``--mlakit-sample N`` keeps a deterministic, stratified sample of about N cases (each test
  function keeps at least 8, or all it has; see ``sample_sizes``); ``--mlakit-budget S`` skips
  what is left once S seconds have passed (reported as not run). Both are reported with the
  full counts.
* ``--mlakit-shard K/N`` keeps the K-th of N shards of that selection (0 <= K < N): its cases
  dealt round-robin within each test function, so that every shard gets its share of the slow
  ones. scripts/upstream_tests.py --jobs runs the N shards at once; each process draws the same
  sample, and the summary's ``selection`` (a hash of the whole selection) shows that they did.
* ``--mlakit-summary PATH`` appends one JSON line per case (outcome, reason, duration) and
  writes ``PATH.summary.json`` at the end: collected and selected counts, outcome counts and the
  distinct reasons with counts.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import math
import os
import re
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import pytest

_DENSE = "test_flash_mla_dense_decoding.py"
_SPARSE = "test_flash_mla_sparse_decoding.py"

# Upstream tests that check a refusal of FlashInfer's that mlakit does not share: mlakit computes
# what FlashInfer refuses, so the test's pytest.raises fails. Reported as xfail (strict: if one
# passes, the entry is stale and the run says so).
KNOWN_DIFFERENCES = {
    "test_deepseek_mla.py::test_fp8_kv_plan_rejects_fp16_q": (
        "FlashInfer's plan refuses an fp16 q with an fp8 cache; mlakit computes it (the test "
        "checks FlashInfer's refusal)"
    ),
}

_PERFORMANCE_NOTE = (
    "FlashMLA performance cases run as correctness cases (their timing looks FlashMLA's own "
    "kernels up by name in a profile)"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mlakit-upstream")
    group.addoption("--mlakit-summary", default=None, help="JSON lines of outcomes, and a summary")
    group.addoption("--mlakit-sample", type=int, default=0, help="keep at most N cases (0: all)")
    group.addoption("--mlakit-budget", type=float, default=0.0,
                    help="seconds of testing, then the rest is not run (0: no limit)")  # fmt: skip
    group.addoption("--mlakit-seed", type=int, default=0, help="seed of the sample and order")
    group.addoption("--mlakit-shard", default="0/1", help="K/N: the K-th of N shards (0/1: all)")
    group.addoption("--mlakit-only", default=None,
                    help="a file of node ids (one a line, after an optional 'suite<TAB>'): "
                         "run only those")  # fmt: skip
    group.addoption("--flashmla-dtype", choices=("bf16", "fp16"), default="bf16",
                    help="the dense FlashMLA test's --dtype (its default: bf16)")  # fmt: skip


# ---- FlashMLA: the cases main() runs ------------------------------------------------------------


def _flashmla_kind(module: Any) -> Optional[str]:
    name = os.path.basename(getattr(module, "__file__", "") or "")
    return {_DENSE: "dense", _SPARSE: "sparse"}.get(name)


def _dense_cases(module: Any, dtype: str) -> List[Any]:
    """The TestParams the dense test's main(torch_dtype) runs, in order: main() is called with
    its test function replaced by a recorder and its device settings made inert."""
    torch = module.torch
    recorded: List[Any] = []
    patch = pytest.MonkeyPatch()
    try:
        patch.setattr(module, "test_flash_mla", recorded.append)
        patch.setattr(torch, "set_default_dtype", lambda *a, **k: None)
        patch.setattr(torch, "set_default_device", lambda *a, **k: None)
        patch.setattr(torch.cuda, "set_device", lambda *a, **k: None)
        patch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: (9, 0))
        module.main(torch.bfloat16 if dtype == "bf16" else torch.float16)
    finally:
        patch.undo()
    return recorded


def _dense_id(i: int, t: Any) -> str:
    flags = ["varlen" if t.is_varlen else "fixed", "causal" if t.is_causal else "full"]
    if t.have_zero_seqlen_k:
        flags.append("zero")
    if getattr(t, "_mlakit_performance", False):
        flags.append("perf")
    return f"{i:04d}-b{t.b}-sq{t.s_q}-sk{t.s_k}-hq{t.h_q}-hkv{t.h_kv}-" + "-".join(flags)


def _sparse_id(i: int, p: Any) -> str:
    d = p.decode
    text = (f"{i:04d}-b{d.b}-hq{p.h_q}-sq{p.s_q}-sk{p.s_kv}-topk{p.topk}-dqk{p.d_qk}-"
            f"bs{d.block_size}")  # fmt: skip
    if d.extra_topk is not None:
        text += f"-extra{d.extra_topk}bs{d.extra_block_size}"
    if p.have_topk_length:
        text += "-len"
    if getattr(p, "_mlakit_performance", False):
        text += "-perf"
    return text


def _as_correctness_case(case: Any, **change: Any) -> Any:
    new = dataclasses.replace(case, **change)
    object.__setattr__(new, "_mlakit_performance", True)
    return new


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    kind = _flashmla_kind(metafunc.module)
    if kind is None or metafunc.function.__name__ != "test_flash_mla":
        return
    if kind == "dense":
        cases = _dense_cases(metafunc.module, metafunc.config.getoption("--flashmla-dtype"))
        cases = [_as_correctness_case(t, test_performance=False) if t.test_performance else t
                 for t in cases]  # fmt: skip
        metafunc.parametrize("t", cases, ids=[_dense_id(i, t) for i, t in enumerate(cases)])
    else:
        cases = [raw.to_test_param() for raw in metafunc.module.gen_testcase()]
        cases = [_as_correctness_case(p, num_runs=0) if p.num_runs > 0 else p for p in cases]
        metafunc.parametrize("p", cases, ids=[_sparse_id(i, p) for i, p in enumerate(cases)])


@pytest.fixture(autouse=True, scope="module")
def _mlakit_flashmla_main_settings(request: pytest.FixtureRequest):
    """The settings FlashMLA's main() makes before running its cases, undone after the module."""
    kind = _flashmla_kind(request.module)
    if kind is None:
        yield
        return
    import torch

    if not torch.cuda.is_available():
        pytest.skip("FlashMLA's decoding tests run on cuda:0 (main() makes it the default "
                    "device): no CUDA device")  # fmt: skip
    if kind == "dense" and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("FlashMLA's dense decoding test runs on sm_90 only (main() asserts it)")
    dtype = torch.float16 if kind == "dense" and request.config.getoption(
        "--flashmla-dtype") == "fp16" else torch.bfloat16  # fmt: skip
    saved = (torch.get_default_dtype(), torch.get_float32_matmul_precision(),
             torch.get_num_threads())  # fmt: skip
    torch.set_default_dtype(dtype)
    torch.set_default_device("cuda:0")
    torch.cuda.set_device(0)
    if kind == "sparse":
        torch.set_float32_matmul_precision("high")
        # main() asks for 32 CPU threads; a runner that shares the machine between several
        # processes (scripts/upstream_tests.py --jobs) sets OMP_NUM_THREADS, which then wins.
        if "OMP_NUM_THREADS" not in os.environ:
            torch.set_num_threads(32)
    try:
        yield
    finally:
        torch.set_default_device(None)
        torch.set_default_dtype(saved[0])
        torch.set_float32_matmul_precision(saved[1])
        torch.set_num_threads(saved[2])


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Optional[bool]:
    """The sparse test returns a Result instead of asserting; main() stops at one whose
    is_correct is False. Here that case fails."""
    if _flashmla_kind(pyfuncitem.module) != "sparse" or pyfuncitem.originalname != "test_flash_mla":
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    result = pyfuncitem.obj(**args)
    assert result.is_correct, "FlashMLA's check of out and lse failed (main() would exit 1)"
    return True


# ---- FlashInfer: the capability the stand-in reports --------------------------------------------


def _report_capability(item: pytest.Item) -> None:
    utils = sys.modules.get("flashinfer.utils")
    if utils is None or not hasattr(utils, "report_capability"):
        return
    params = getattr(getattr(item, "callspec", None), "params", {})
    utils.report_capability((12, 0) if params.get("backend") == "xqa" else (10, 7))


# ---- refusals -----------------------------------------------------------------------------------


def _mlakit_dirs() -> Tuple[str, ...]:
    dirs = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "standin")]
    mlakit = sys.modules.get("mlakit")
    if mlakit is not None and getattr(mlakit, "__file__", None):
        dirs.append(os.path.dirname(os.path.abspath(mlakit.__file__)))
    return tuple(dirs)


def _is_refusal(excinfo: pytest.ExceptionInfo) -> bool:
    """A NotImplementedError raised by mlakit or its stand-ins (the raising frame is theirs)."""
    if not excinfo.errisinstance(NotImplementedError):
        return False
    tb = excinfo.value.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return last is not None and os.path.abspath(last).startswith(_mlakit_dirs())


def _numbers_out(text: str) -> str:
    text = re.sub(r"torch\.Size\(\[[^\]]*\]\)", "[...]", text)
    text = re.sub(r"\[[-\d, ]*\]", "[...]", text)
    return re.sub(r"(?<![\w.])-?\d+(\.\d+)?(e[-+]?\d+)?(?!\w)", "N", text)


def normalize_reason(text: str) -> str:
    """A reason with its per-case numbers taken out, to count cases by reason. In a refusal
    ("<what> is not supported by <whom> (<why>)") only <what> varies by case."""
    text = text.strip().splitlines()[0] if text.strip() else ""
    what, sep, why = text.partition(" is not supported by ")
    return (_numbers_out(what) + sep + why if sep else _numbers_out(text))[:300]


# ---- sample, order, budget ----------------------------------------------------------------------


def _stable_key(text: str, seed: int) -> int:
    return int.from_bytes(hashlib.sha1(f"{seed}:{text}".encode()).digest()[:8], "big")


def _group_of(item: pytest.Item) -> str:
    """The stratum of a case: its test function; FlashMLA's one function by kind of case."""
    name = getattr(item, "originalname", item.name)
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "t" in params and hasattr(params["t"], "h_kv"):  # FlashMLA dense
        t = params["t"]
        kind = "perf" if getattr(t, "_mlakit_performance", False) else (
            "corner" if t.have_zero_seqlen_k else "main")  # fmt: skip
        return f"{name}[h_kv {'1' if t.h_kv == 1 else '>1'}, {kind}]"
    if "p" in params and hasattr(params["p"], "decode"):  # FlashMLA sparse
        p = params["p"]
        kind = "perf" if getattr(p, "_mlakit_performance", False) else "check"
        extra = p.decode.extra_topk is not None
        return f"{name}[d_qk {p.d_qk}, extra {'yes' if extra else 'no'}, {kind}]"
    return name


def sample_sizes(sizes: Dict[str, int], total: int, floor: int = 8) -> Dict[str, int]:
    """How many cases of each group to keep so that about ``total`` are kept: every group keeps
    ``floor`` cases (all, if it has fewer), and the rest of ``total`` goes to the larger groups,
    smallest first, each taking its share by the square root of its size (so a group of 19,000
    cases does not crowd out one of 60)."""
    keep = {g: min(n, floor) for g, n in sizes.items()}
    left = max(0, total - sum(keep.values()))
    pending = sorted((g for g in sizes if sizes[g] > keep[g]), key=lambda g: (sizes[g], g))
    for i, group in enumerate(pending):
        weight = sum(math.sqrt(sizes[g]) for g in pending[i:])
        extra = min(sizes[group] - keep[group], int(round(left * math.sqrt(sizes[group]) / weight)))
        keep[group] += extra
        left -= extra
    return keep


def parse_shard(text: str) -> Tuple[int, int]:
    """``"K/N"`` as (K, N), checked."""
    k, sep, n = text.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 0 <= int(k) < int(n)):
        raise pytest.UsageError(f"--mlakit-shard {text}: expected K/N with 0 <= K < N")
    return int(k), int(n)


def deal(keys: List[Tuple[str, int]], shards: int) -> List[int]:
    """The shard of each case, given its (group, order key): round-robin through the cases sorted
    by group, then key, so that each group's cases (the slow test functions' too) spread evenly
    and the shards' sizes differ by one at most."""
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    shard_of = [0] * len(keys)
    for position, i in enumerate(order):
        shard_of[i] = position % shards
    return shard_of


def read_only(path: Optional[str]) -> Optional[set]:
    """The node ids of an --mlakit-only file (a line's text after its last tab; blank lines and
    lines starting with '#' skipped), or None without one."""
    if not path:
        return None
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n").split("\t")[-1].strip() for line in f]
    return {line for line in lines if line and not line.startswith("#")}


class _State:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.summary_path: Optional[str] = config.getoption("--mlakit-summary")
        self.sample = int(config.getoption("--mlakit-sample"))
        self.budget = float(config.getoption("--mlakit-budget"))
        self.seed = int(config.getoption("--mlakit-seed"))
        self.shard, self.shards = parse_shard(config.getoption("--mlakit-shard"))
        self.only = read_only(config.getoption("--mlakit-only"))
        self.selection = ""  # a hash of the selection's node ids, before sharding
        self.collected: Dict[str, int] = {}
        self.selected: Dict[str, int] = {}
        self.notes: List[str] = []
        self.start: Optional[float] = None
        self.records: Dict[str, Dict[str, Any]] = {}
        self.counts: collections.Counter = collections.Counter()
        self.reasons: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.out = None
        if self.summary_path:
            os.makedirs(os.path.dirname(os.path.abspath(self.summary_path)), exist_ok=True)
            self.out = open(self.summary_path, "a", encoding="utf-8")


_STATE_KEY = pytest.StashKey[_State]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_STATE_KEY] = _State(config)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: List[pytest.Item]
) -> None:
    state = config.stash[_STATE_KEY]
    if state.only is not None:  # a rerun of listed cases, before any sample
        others = [i for i in items if i.nodeid not in state.only]
        items[:] = [i for i in items if i.nodeid in state.only]
        if others:
            config.hook.pytest_deselected(items=others)
        state.notes.append(f"only the {len(items)} cases listed in --only")
    groups: Dict[str, List[pytest.Item]] = collections.defaultdict(list)
    for item in items:
        groups[_group_of(item)].append(item)
    state.collected = {g: len(v) for g, v in groups.items()}
    for item in items:
        for key, reason in KNOWN_DIFFERENCES.items():
            if item.nodeid.endswith(key) or ("/" + key) in item.nodeid:
                item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
    if any(getattr(i, "_mlakit_performance", False) for i in _params_of(items)):
        state.notes.append(_PERFORMANCE_NOTE)
    if state.sample <= 0 or state.sample >= len(items):
        keep = list(items)
    else:
        sizes = sample_sizes(state.collected, state.sample)
        keep = []
        for group, members in groups.items():
            members = sorted(members, key=lambda i: _stable_key(i.nodeid, state.seed))
            keep.extend(members[: sizes[group]])
        kept = set(id(i) for i in keep)
        dropped = [i for i in items if id(i) not in kept]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        state.notes.append(
            f"a deterministic sample of {len(keep)} of {len(items)} cases (seed {state.seed}; "
            "every test function keeps at least 8 or all it has)"
        )
    # A seeded order, so that a run cut short by its budget has run a sample of every group.
    keep.sort(key=lambda i: _stable_key(i.nodeid, state.seed + 1))
    state.selection = hashlib.sha1("\n".join(i.nodeid for i in keep).encode()).hexdigest()[:16]
    if state.shards > 1:
        keys = [(_group_of(i), _stable_key(i.nodeid, state.seed + 1)) for i in keep]
        shard_of = deal(keys, state.shards)
        others = [i for i, s in zip(keep, shard_of) if s != state.shard]
        keep = [i for i, s in zip(keep, shard_of) if s == state.shard]
        if others:
            config.hook.pytest_deselected(items=others)
    items[:] = keep
    selected: collections.Counter = collections.Counter(_group_of(i) for i in keep)
    state.selected = dict(selected)


def _params_of(items: List[pytest.Item]) -> List[Any]:
    values = []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        values.extend(params.values())
    return values


def pytest_runtest_setup(item: pytest.Item) -> None:
    state = item.config.stash[_STATE_KEY]
    if state.start is None:
        state.start = time.monotonic()
    if state.budget > 0 and time.monotonic() - state.start > state.budget:
        pytest.skip(f"not run: the suite's time budget ({state.budget:.0f} s) was spent")
    _report_capability(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if (
        report.failed
        and call.excinfo is not None
        and not hasattr(report, "wasxfail")
        and _is_refusal(call.excinfo)
    ):
        message = str(call.excinfo.value).strip().splitlines()[0]
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"mlakit refuses: {message}")
        report.user_properties.append(("mlakit", "refused"))


def _classify(report: pytest.TestReport) -> Tuple[str, str]:
    if hasattr(report, "wasxfail"):
        return ("xfailed" if report.skipped else "xpassed"), report.wasxfail
    if report.passed:
        return "passed", ""
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason
        if reason.startswith("mlakit refuses: "):
            return "refused", reason[len("mlakit refuses: "):]
        if reason.startswith("not run: "):
            return "not_run", reason
        return "skipped", reason
    text = str(report.longrepr) if report.longrepr is not None else ""
    lines = [ln for ln in text.splitlines() if ln.startswith("E ")]
    return ("failed" if report.when == "call" else "error"), (lines[0][1:].strip() if lines
                                                               else text[-200:])  # fmt: skip


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    state = _STATE
    if state is None:
        return
    record = state.records.setdefault(report.nodeid, {"nodeid": report.nodeid, "duration": 0.0})
    record["duration"] += report.duration
    if report.when == "call" or (report.when == "setup" and not report.passed):
        record["outcome"], record["reason"] = _classify(report)
    elif report.when == "teardown" and report.failed and record.get("outcome") == "passed":
        record["outcome"], record["reason"] = _classify(report)
    if report.when != "teardown":
        return
    state.records.pop(report.nodeid)
    outcome = record.get("outcome", "error")
    state.counts[outcome] += 1
    if outcome != "passed":
        reason = record.get("reason", "")
        # A skip's reason is the test's own text; failures and refusals carry per-case numbers.
        if outcome in ("failed", "error", "refused"):
            reason = normalize_reason(reason)
        state.reasons[outcome][reason.strip().splitlines()[0] if reason.strip() else ""] += 1
    if state.out is not None:
        record["duration"] = round(record["duration"], 4)
        state.out.write(json.dumps(record) + "\n")
        state.out.flush()


_STATE: Optional[_State] = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    global _STATE
    _STATE = session.config.stash[_STATE_KEY]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash[_STATE_KEY]
    utils = sys.modules.get("flashinfer.utils")
    if utils is not None and hasattr(utils, "report_capability"):
        utils.report_capability(None)
    if state.out is None:
        return
    state.out.close()
    summary = {
        "collected": sum(state.collected.values()),
        "selected": sum(state.selected.values()),
        "collected_by_group": state.collected,
        "selected_by_group": state.selected,
        "outcomes": dict(state.counts),
        "reasons": {k: dict(v.most_common()) for k, v in state.reasons.items()},
        "notes": state.notes,
        "selection": state.selection,
        "exitstatus": int(exitstatus),
        "seconds": round(time.monotonic() - state.start, 1) if state.start else 0.0,
    }
    with open(state.summary_path + ".summary.json", "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
