"""Host faults inside a run become Python exceptions: a host allocation that fails on one of the
cpu backend's worker threads ended the process (an uncaught std::bad_alloc)."""

import os
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")

# One request of 2^20 tokens that all read page 0: 40 MB of scratch for each of its two blocks of
# 8 heads, in a process limited to 16 MB more address space than it holds.
SCRIPT = """
import resource
import numpy as np
import mlakit

d = mlakit.Decoder(h_q=16, page_size=64, max_batch=1, max_seq_len=1 << 20, backend="cpu")
q = np.full((1, 1, 16, 576), 0x3F80, np.uint16)
kv = np.full((1, 64, 576), 0x3F80, np.uint16)
table = np.zeros((1, 1 << 14), np.int32)
lens = np.array([1 << 20], np.int32)
out = np.empty((1, 1, 16, 512), np.uint16)
with open("/proc/self/statm") as f:
    pages = int(f.read().split()[0])
limit = pages * resource.getpagesize() + (16 << 20)
resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
try:
    d.run(q, kv, table, lens, out=out)
except RuntimeError as e:
    print(e)
"""


def test_out_of_host_memory_in_a_run_raises():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=os.path.dirname(os.path.abspath(__file__)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Decoder::run: out of host memory (std::bad_alloc)\n", result.stdout
