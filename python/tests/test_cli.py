"""The command-line program shipped in the package: ``python -m mlakit`` and the ``mlakit``
console script run it (``info --json``, ``check --json`` on the cpu backend)."""

import json
import os
import subprocess
import sys
import sysconfig

import pytest

import mlakit.__main__ as cli

pytestmark = pytest.mark.skipif(not cli.program().is_file(),
                                reason="this build of the package has no mlakit program")  # fmt: skip


def run(*args):
    done = subprocess.run([sys.executable, "-m", "mlakit", *args], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_python_m_mlakit_info_json():
    doc = json.loads(run("info", "--json"))
    import mlakit

    assert doc["mlakit_version"] == mlakit.__version__
    names = [b["name"] for b in doc["backends"]]
    assert names == [b["name"] for b in mlakit.info()["backends"]]
    cpu = next(b for b in doc["backends"] if b["name"] == "cpu")
    assert cpu["available"] and not cpu["device_memory"]


def test_check_json_on_the_cpu_backend():
    doc = json.loads(run("check", "--json", "--backend", "cpu", "--heads", "4", "--s-q", "1",
                         "--batch", "2", "--seq-len", "17", "--page-size", "16", "--var", "0"))  # fmt: skip
    assert doc["failures"] == 0 and [r["result"] for r in doc["results"]] == ["ok"]


def test_console_script_is_installed():
    script = os.path.join(sysconfig.get_path("scripts"), "mlakit")
    if not os.path.exists(script):
        pytest.skip("not installed as a package with its scripts (run from a source tree?)")
    done = subprocess.run([script, "info", "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and json.loads(done.stdout)["backends"], done.stderr
