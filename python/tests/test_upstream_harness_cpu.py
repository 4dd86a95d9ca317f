"""The harness that runs FlashMLA's and FlashInfer's own tests against the shims
(python/tests/upstream, scripts/upstream_tests.py), on the CPU: the sample, the reasons' counts,
the stand-ins' names and capability reports, and the plugin's outcomes on a small test file that
passes, fails, skips and is refused by mlakit, and the runner's shards (--jobs) and their merge."""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pytest

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "upstream")
sys.path.insert(0, HARNESS)
import mlakit_upstream_plugin as plugin  # noqa: E402

sys.path.remove(HARNESS)


def test_sample_keeps_every_group():
    sizes = {"one": 1, "few": 10, "grid": 19008, "sparse": 1344}
    keep = plugin.sample_sizes(sizes, 700)
    assert keep["one"] == 1 and keep["few"] == 10, "small groups whole"
    assert 690 <= sum(keep.values()) <= 710
    assert keep["grid"] > keep["sparse"] > 8, "large groups thinned by the square root"
    assert plugin.sample_sizes(sizes, 0) == {"one": 1, "few": 8, "grid": 8, "sparse": 8}


def test_reasons_are_counted_without_their_numbers():
    assert plugin.normalize_reason(
        "query: 32 query tokens per request is not supported by mlakit (mlakit decodes 1..16 "
        "query tokens per request)\nmore"
    ) == ("query: N query tokens per request is not supported by mlakit (mlakit decodes 1..16 "
          "query tokens per request)")  # fmt: skip
    assert plugin.normalize_reason("Mismatched elements: 12 / 4096 (0.3%) at (0, 1)") == (
        "Mismatched elements: N / N (N%) at (N, N)")  # fmt: skip
    assert plugin.normalize_reason("shape [3, 1, 576] on SM120") == "shape [...] on SM120"


@pytest.fixture
def standins():
    torch = pytest.importorskip("torch")
    path = os.path.join(HARNESS, "standin")
    sys.path.insert(0, path)
    try:
        import flash_mla
        import flashinfer
        import flashinfer.utils

        yield torch, flash_mla, flashinfer
    finally:
        sys.path.remove(path)
        for name in [n for n in sys.modules if n.partition(".")[0] in ("flash_mla", "flashinfer")]:
            del sys.modules[name]


def test_standins_serve_the_shims_and_refuse_the_rest_by_name(standins):
    torch, flash_mla, flashinfer = standins
    from mlakit import compat

    assert flash_mla.flash_mla_with_kvcache is compat.flash_mla_with_kvcache
    assert flash_mla.get_mla_metadata is compat.get_mla_metadata
    assert flashinfer.mla.BatchMLAPagedAttentionWrapper is compat.BatchMLAPagedAttentionWrapper
    assert flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla is (
        compat.trtllm_batch_decode_with_kv_cache_mla)  # fmt: skip
    dims = flashinfer.mla.supported_mla_layer_dimensions
    assert [(d.head_dimensions.kv_lora_rank, d.num_heads) for d in dims] == [
        (512, 128), (512, 64), (256, 32)]  # fmt: skip
    for call, name in [
        (flash_mla.flash_mla_sparse_fwd, "flash_mla_sparse_fwd"),
        (flashinfer.single_prefill_with_kv_cache, "single_prefill_with_kv_cache"),
        (flashinfer.prefill.BatchPrefillWithRaggedKVCacheWrapper,
         "BatchPrefillWithRaggedKVCacheWrapper"),
        (flashinfer.jit.build_jit_specs, "build_jit_specs"),
    ]:  # fmt: skip
        with pytest.raises(NotImplementedError, match=f"^{name}: .* not supported by mlakit"):
            call()
    assert flashinfer.utils.get_trtllm_gen_multi_ctas_kv_counter_bytes(16, 128, 132) == 8192
    assert flashinfer.utils.has_flashinfer_jit_cache()


def test_standin_reports_the_capability_the_harness_sets(standins):
    torch, _, flashinfer = standins
    utils = flashinfer.utils
    with pytest.raises(ValueError, match="cuda device"):
        utils.get_compute_capability(torch.device("cpu"))
    try:
        utils.report_capability((10, 7))
        assert utils.get_compute_capability(torch.device("cuda")) == (10, 7)
        assert utils.is_sm90a_supported(torch.device("cuda"))
        assert utils.is_sm100a_supported(torch.device("cuda"))
        assert flashinfer.cute_dsl.utils.is_cute_dsl_arch_supported(9, 0)
    finally:
        utils.report_capability(None)
    assert not utils.reports_every_backend()


FAKE_SUITE = '''
import pytest
import torch
from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla


def test_passes():
    assert True


def test_fails():
    assert 1 == 2, "wrong"


def test_skips():
    pytest.skip("the upstream test's own reason")


@pytest.mark.parametrize("shared", [False])
def test_refused(shared):
    q = torch.zeros(1, 1, 4, 576, dtype=torch.bfloat16)
    kv = torch.zeros(1, 32, 576, dtype=torch.bfloat16)
    table = torch.zeros(1, 1, dtype=torch.int32)
    lens = torch.ones(1, dtype=torch.int32)
    trtllm_batch_decode_with_kv_cache_mla(q, kv, None, 128, 512, 64, table, lens, 32,
                                          uses_shared_paged_kv_idx=shared)


def test_raises_its_own_not_implemented():
    raise NotImplementedError("not mlakit's")
'''


def test_plugin_sorts_outcomes_and_refusals(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "test_fake.py").write_text(FAKE_SUITE)
    summary = tmp_path / "out" / "cases.jsonl"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(HARNESS, "standin"), HARNESS] + [p for p in [env.get("PYTHONPATH")] if p])
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "test_fake.py", "-p", "mlakit_upstream_plugin",
         "-p", "no:cacheprovider", "-c", os.devnull, "--rootdir", str(tmp_path), "-q",
         "--mlakit-summary", str(summary)],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads((tmp_path / "out" / "cases.jsonl.summary.json").read_text())
    assert result["collected"] == 5 and result["selected"] == 5
    assert result["outcomes"] == {"passed": 1, "failed": 2, "skipped": 1, "refused": 1}
    (refusal,) = result["reasons"]["refused"]
    assert refusal.startswith("uses_shared_paged_kv_idx: False (separate K and V page tables) "
                              "is not supported by mlakit")  # fmt: skip
    assert result["reasons"]["skipped"] == {"the upstream test's own reason": 1}
    lines = [json.loads(line) for line in summary.read_text().splitlines()]
    assert {r["outcome"] for r in lines if "own_not_implemented" in r["nodeid"]} == {"failed"}


def test_deal_spreads_every_group_over_the_shards():
    keys = [("fast", i * 7919 % 101) for i in range(101)] + [("slow", i) for i in range(5)]
    shard_of = plugin.deal(keys, 4)
    for group in ("slow", "fast"):
        counts = [sum(1 for k, s in zip(keys, shard_of) if k[0] == group and s == shard)
                  for shard in range(4)]  # fmt: skip
        assert max(counts) - min(counts) <= 1, (group, counts)
    sizes = [shard_of.count(shard) for shard in range(4)]
    assert sum(sizes) == len(keys) and max(sizes) - min(sizes) <= 1
    assert plugin.parse_shard("2/3") == (2, 3)
    for bad in ("3/3", "1", "-1/2", "a/b"):
        with pytest.raises(pytest.UsageError):
            plugin.parse_shard(bad)


SHARDED_SUITE = '''
import pytest


@pytest.mark.parametrize("i", range(30))
def test_fast(i):
    assert True


@pytest.mark.parametrize("i", range(5))
def test_slow(i):
    assert True


def test_fails():
    assert False, "wrong"
'''


def _script():
    path = os.path.join(HARNESS, "..", "..", "..", "scripts", "upstream_tests.py")
    spec = importlib.util.spec_from_file_location("upstream_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("scale", [0.0, 1.0])
def test_jobs_split_the_same_selection_and_merge_it(tmp_path, scale):
    """scripts/upstream_tests.py --jobs: the shards run the cases that one process runs, once
    each, and the five outputs merge them."""
    script = _script()
    (tmp_path / "up" / "proj" / "tests").mkdir(parents=True)
    (tmp_path / "up" / "proj" / "tests" / "test_sharded.py").write_text(SHARDED_SUITE)
    suite = script.Suite("fake", "proj", ["tests/test_sharded.py"], 20, 60, "a fake suite")
    runs = {}
    for jobs in (1, 3):
        work = tmp_path / f"work{jobs}"
        work.mkdir()
        args = argparse.Namespace(upstream=str(tmp_path / "up"), scale=scale, collect_only=False,
                                  jobs=jobs)  # fmt: skip
        with open(work / "log.txt", "w") as log:
            summary = script.run_suite(suite, args, str(work), log)
        parts = {"fake": [f"fake.{k}" for k in range(jobs)]}
        script.merge_cases(str(work), parts, str(work / "cases.jsonl"))
        script.merge_junit(str(work), parts, str(work / "junit.xml"))
        cases = [json.loads(line) for line in (work / "cases.jsonl").read_text().splitlines()]
        (junit,) = ElementTree.parse(work / "junit.xml").getroot()
        runs[jobs] = summary, [c["nodeid"] for c in cases], junit
    one, three = runs[1], runs[3]
    assert "error" not in three[0], three[0]
    assert len(three[1]) == len(set(three[1])) and set(three[1]) == set(one[1])
    assert len(one[1]) == (36 if scale == 0 else 20)
    assert three[0]["selection"] == one[0]["selection"]
    for key in ("collected", "selected", "collected_by_group", "selected_by_group", "outcomes",
                "reasons", "exitstatus"):  # fmt: skip
        assert three[0][key] == one[0][key], key
    assert three[0]["exitstatus"] == 1 and three[0]["outcomes"]["failed"] == 1
    assert three[2].get("name") == "fake" and int(three[2].get("tests")) == len(one[1])
    assert int(three[2].get("failures")) == 1 and len(three[2]) == len(one[1])


def test_only_reruns_the_listed_cases(tmp_path):
    """--only FILE (failed_cases.txt of a record: 'suite<TAB>node id' lines) runs those cases
    alone, with one process or several."""
    script = _script()
    (tmp_path / "up" / "proj" / "tests").mkdir(parents=True)
    (tmp_path / "up" / "proj" / "tests" / "test_sharded.py").write_text(SHARDED_SUITE)
    suite = script.Suite("fake", "proj", ["tests/test_sharded.py"], 20, 60, "a fake suite")
    listed = ["tests/test_sharded.py::test_fast[3]", "tests/test_sharded.py::test_slow[4]",
              "tests/test_sharded.py::test_fails"]  # fmt: skip
    only = tmp_path / "failed_cases.txt"
    only.write_text("# a comment\n" + "".join(f"fake\t{n}\n" for n in listed[:2]) + listed[2] + "\n")
    for jobs in (1, 2):
        work = tmp_path / f"work{jobs}"
        work.mkdir()
        args = argparse.Namespace(upstream=str(tmp_path / "up"), scale=0.0, collect_only=False,
                                  jobs=jobs, only=str(only))  # fmt: skip
        with open(work / "log.txt", "w") as log:
            summary = script.run_suite(suite, args, str(work), log)
        parts = {"fake": [f"fake.{k}" for k in range(jobs)]}
        script.merge_cases(str(work), parts, str(work / "cases.jsonl"))
        cases = [json.loads(line) for line in (work / "cases.jsonl").read_text().splitlines()]
        assert sorted(c["nodeid"] for c in cases) == sorted(listed), jobs
        assert summary["outcomes"] == {"passed": 2, "failed": 1}, summary


OOM_SUITE = '''
import os

import pytest


@pytest.mark.parametrize("i", range(6))
def test_fits(i):
    assert True


@pytest.mark.parametrize("i", range(3))
def test_big(i):
    # Out of GPU memory the first time each case runs (several processes sharing a GPU), then
    # fine: the marker files say which have run.
    marker = os.path.join(os.environ["OOM_MARKERS"], f"big{i}")
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8 GiB")


def test_wrong():
    assert False, "a wrong result"
'''


def test_out_of_memory_cases_are_rerun_with_fewer_processes(tmp_path, monkeypatch):
    """With --jobs, the cases that ran out of GPU memory are rerun (a quarter of the processes,
    then one); the table counts their last run, cases.jsonl has both, other failures stay."""
    script = _script()
    (tmp_path / "up" / "proj" / "tests").mkdir(parents=True)
    (tmp_path / "up" / "proj" / "tests" / "test_oom.py").write_text(OOM_SUITE)
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv("OOM_MARKERS", str(markers))
    suite = script.Suite("fake", "proj", ["tests/test_oom.py"], 20, 60, "a fake suite")
    work = tmp_path / "work"
    work.mkdir()
    args = argparse.Namespace(upstream=str(tmp_path / "up"), scale=0.0, collect_only=False,
                              jobs=2)  # fmt: skip
    with open(work / "log.txt", "w") as log:
        summary = script.run_suite(suite, args, str(work), log)
    assert summary["outcomes"] == {"passed": 6, "failed": 4}, summary
    assert summary["retries"] == [{"jobs": 1, "cases": 3, "outcomes": {"passed": 3},
                                   "dir": "retry1"}]  # fmt: skip
    assert summary["final_outcomes"] == {"passed": 9, "failed": 1}
    script.merge_cases(str(work), {"fake": ["fake.0", "fake.1"]}, str(work / "cases.jsonl"))
    cases = [json.loads(line) for line in (work / "cases.jsonl").read_text().splitlines()]
    assert len(cases) == 13 and sum(1 for c in cases if c.get("retry") == 1) == 3
    assert "| fake |" in script.table({"fake": summary}).replace("  ", " ")
    assert " 9 |" in script.table({"fake": summary})
    assert "Rerun with 1 process: the 3 cases that ran out of GPU memory: passed 3." in \
        script.markdown({"fake": summary}, [suite])
