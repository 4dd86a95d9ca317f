"""Every validation error: its exception type and a message naming the argument, the expected
and the given (NumPy arrays, cpu backend)."""

import re

import pytest

np = pytest.importorskip("numpy")

import mlakit  # noqa: E402
from mlakit import _mlakit  # noqa: E402
from numpy_reference import make_workload, random_bits  # noqa: E402

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None

H, PAGE, B = 4, 16, 2
NOT_AN_ARRAY = "expected an array (NumPy, PyTorch, CuPy, JAX or another DLPack producer)"
KV_SHAPES = (
    "kv_cache: expected shape [num_pages, page_size, 576] (or with a 1 before or after "
    "page_size) = [*, 16, 576] or [*, 16, 1, 576] or [*, 1, 16, 576]"
)


def make_decoder(**kwargs):
    args = dict(h_q=H, page_size=PAGE, max_batch=B, max_seq_len=64, backend="cpu")
    args.update(kwargs)
    return mlakit.Decoder(**args)


@pytest.fixture
def work():
    return make_workload(np.random.default_rng(0), b=B, s_q=1, h_q=H, page_size=PAGE,
                         seq_lens=[20, 7])  # fmt: skip


def raises(exception, pattern):
    return pytest.raises(exception, match=re.escape(pattern))


# ---- Decoder (problem) errors ---------------------------------------------------------------

DECODER_ERRORS = [
    (dict(h_q=0), ValueError, "heads (h_q): expected 1..128, given 0"),
    (dict(h_q=129), ValueError, "heads (h_q): expected 1..128, given 129"),
    (dict(s_q=17), ValueError, "s_q: expected 1..16, given 17"),
    (dict(page_size=0), ValueError, "page_size: expected 1..1024, given 0"),
    (dict(max_batch=0), ValueError, "max_batch: expected 1..1048576, given 0"),
    (dict(max_seq_len=-1), ValueError, "max_seq_len: expected 0..16777216, given -1"),
    (dict(topk=-1), ValueError, "topk: expected 0..65536, given -1"),
    (dict(q_dtype="int8"), ValueError, "q_dtype: expected bf16, fp16 or fp8_e4m3, given int8"),
    (dict(kv_dtype="fp64"), ValueError, "kv_dtype: expected bf16, fp16 or fp8_e4m3, given fp64"),
    (dict(q_dtype="fp16", kv_dtype="bf16"), ValueError, "q_dtype: expected bf16 (the kv_dtype)"),
    (dict(out_dtype="fp16"), ValueError, "out_dtype: expected bf16 (the kv_dtype), given fp16"),
    (dict(out_dtype="fp32"), ValueError, "out_dtype: expected bf16 or fp16, given fp32"),
    (
        dict(kv_layout="paged"),
        ValueError,
        "kv_layout: expected dense, fp8_blockwise (v32) or fp8_v4 (v4), given paged",
    ),
    (
        dict(kv_layout="fp8_blockwise", kv_dtype="bf16"),
        ValueError,
        "kv_dtype: expected fp8_e4m3 with kv_layout fp8_blockwise, given bf16",
    ),
    (
        dict(kv_layout="v4", kv_dtype="fp16", q_dtype="fp16"),
        ValueError,
        "kv_dtype: expected fp8_e4m3 with kv_layout fp8_v4, given fp16",
    ),
    (dict(kv_layout="v4", q_dtype="fp8"), ValueError, "q_dtype: expected bf16 or fp16 with fp8_v4"),
    (dict(backend="nope"), ValueError, "backend: expected auto or one of"),
    (dict(tactic=7), ValueError, "tactic: expected one of 0 (reference) for backend cpu, given 7"),
]


@pytest.mark.parametrize("kwargs,exception,message", DECODER_ERRORS)
def test_decoder_errors(kwargs, exception, message):
    with raises(exception, message):
        make_decoder(**kwargs)


def built_without_cuda(backend):
    return "not in this build" in backend["unavailable_reason"]


def test_gpu_backend_without_gpu_is_not_implemented():
    info = mlakit.info()
    gpu = [b["name"] for b in info["backends"] if b["device_memory"] and not built_without_cuda(b)]
    if info["device"]["present"] or not gpu:
        pytest.skip("needs a build with a GPU backend, on a machine without a GPU")
    with pytest.raises(NotImplementedError, match="no CUDA device"):
        make_decoder(backend=gpu[0])


def test_gpu_backends_of_a_build_without_cuda_say_why():
    """Built without a CUDA compiler: the GPU backends are listed, unavailable, with the reason,
    and asking for one raises it."""
    info = mlakit.info()
    absent = [b for b in info["backends"] if built_without_cuda(b)]
    if not absent:
        pytest.skip("a build with CUDA")
    assert sorted(b["name"] for b in absent) == ["sm80", "sm90"]
    assert not any(b["available"] for b in absent)
    assert "mlakit was built without CUDA" in info["device"]["error"]
    with pytest.raises(NotImplementedError, match="backend sm90 is not in this build"):
        make_decoder(backend="sm90")
    assert make_decoder(backend="auto").backend == "cpu"


@pytest.mark.parametrize(
    "code,exception",
    [(1, ValueError), (2, NotImplementedError), (3, RuntimeError), (4, RuntimeError)],
)
def test_status_codes_map_to_exceptions(code, exception):
    with raises(exception, "the message"):
        _mlakit._raise_status(code, "the message")
    _mlakit._raise_status(0, "ok: nothing raised")


# ---- run() errors -----------------------------------------------------------------------------


def run(decoder, w, **overrides):
    args = dict(q=w.q, kv_cache=w.kv_cache, block_table=w.block_table, seq_lens=w.seq_lens)
    args.update(overrides)
    return decoder.run(args.pop("q"), args.pop("kv_cache"), args.pop("block_table"),
                       args.pop("seq_lens"), **args)  # fmt: skip


def test_q_errors(work):
    d = make_decoder()
    with raises(TypeError, "q: expected dtype bfloat16 (or its bits as uint16), given float32"):
        run(d, work, q=work.q.astype(np.float32))
    with raises(TypeError, "q: expected dtype bfloat16 (or its bits as uint16), given float16"):
        run(d, work, q=work.q.view(np.float16))
    with raises(
        ValueError, "q: expected shape [b, s_q, h_q, 576] = [*, 1, 4, 576], given [2, 1, 4, 512]"
    ):
        run(d, work, q=np.ascontiguousarray(work.q[..., :512]))
    with raises(
        ValueError, "q: expected shape [b, s_q, h_q, 576] = [*, 1, 4, 576], given [2, 4, 576]"
    ):
        run(d, work, q=work.q[:, 0])
    transposed = np.ascontiguousarray(work.q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    with raises(
        ValueError,
        "q: expected a view whose last dimension is contiguous (stride 1), given shape "
        "[2, 1, 4, 576] with strides [4608, 4608, 1152, 2]",
    ):
        run(d, work, q=np.concatenate([work.q, work.q], axis=3)[..., ::2])
    # Rows 577 elements apart: a view, but its rows would not be 16-byte aligned.
    padded = np.zeros((2, 1, 4, 577), work.q.dtype)
    padded[..., :576] = work.q
    with raises(ValueError, "q_stride_h: expected a stride whose rows stay 16-byte aligned"):
        run(d, work, q=padded[..., :576])
    run(d, work, q=transposed)  # s_q = 1: the stride of a size-1 dimension does not matter
    with raises(
        TypeError,
        "q: " + NOT_AN_ARRAY + ", given list",
    ):
        run(d, work, q=work.q.tolist())
    with raises(ValueError, "batch: expected 1..2, given 3"):
        big = make_workload(np.random.default_rng(1), b=3, s_q=1, h_q=H, page_size=PAGE,
                            seq_lens=[1, 2, 3])  # fmt: skip
        run(d, big)


@pytest.mark.skipif(ml_dtypes is None, reason="needs ml_dtypes")
def test_ml_dtypes_mismatch(work):
    d = make_decoder(q_dtype="fp16")
    with raises(TypeError, "q: expected dtype float16 (or its bits as uint16), given bfloat16"):
        run(d, work, q=work.q.view(ml_dtypes.bfloat16))
    with raises(
        TypeError, "kv_cache: expected dtype float16 (or its bits as uint16), given float8_e4m3fn"
    ):
        run(d, work, kv_cache=random_bits(np.random.default_rng(0), (4, PAGE, 576), "fp8_e4m3")
            .view(ml_dtypes.float8_e4m3fn))  # fmt: skip


def test_kv_cache_errors(work):
    d = make_decoder()
    with raises(
        TypeError, "kv_cache: expected dtype bfloat16 (or its bits as uint16), given int16"
    ):
        run(d, work, kv_cache=work.kv_cache.view(np.int16))
    with raises(
        ValueError,
        KV_SHAPES + ", given [2, 32, 576]",
    ):
        run(d, work, kv_cache=work.kv_cache[:4].reshape(-1, 32, 576))
    with raises(ValueError, "kv_cache: expected a view whose last dimension is contiguous"):
        run(d, work, kv_cache=np.concatenate([work.kv_cache] * 2, axis=2)[..., ::2])


def test_blockwise_cache_errors():
    d = make_decoder(kv_dtype="fp8_e4m3", kv_layout="fp8_blockwise")
    w = make_workload(np.random.default_rng(2), b=1, s_q=1, h_q=H, page_size=PAGE, seq_lens=[5],
                      blockwise=True)  # fmt: skip
    with raises(
        TypeError,
        "kv_cache: expected dtype a 1-byte type (uint8, int8 or float8_e4m3fn), given uint16",
    ):
        run(d, w, kv_cache=w.kv_cache.view(np.uint16))
    with raises(ValueError, "kv_cache: expected shape [num_pages, page_size, 656 bytes]"):
        run(d, w, kv_cache=np.ascontiguousarray(w.kv_cache[..., :576]))
    run(d, w, kv_cache=w.kv_cache.view(np.int8))


def test_block_table_and_seq_lens_errors(work):
    d = make_decoder()
    with raises(TypeError, "block_table: expected dtype int32, given int64"):
        run(d, work, block_table=work.block_table.astype(np.int64))
    with raises(ValueError, "block_table: expected shape [b, max_pages] = [2, >= 1], given [1, 2]"):
        run(d, work, block_table=work.block_table[:1])
    with raises(ValueError, "block_table: expected rows of contiguous int32 (inner stride 1"):
        run(d, work, block_table=np.repeat(work.block_table, 2, axis=1)[:, ::2])
    with raises(
        TypeError,
        "block_table: " + NOT_AN_ARRAY + ", given None",
    ):
        run(d, work, block_table=None)
    with raises(TypeError, "seq_lens: expected dtype int32, given float32"):
        run(d, work, seq_lens=work.seq_lens.astype(np.float32))
    with raises(ValueError, "seq_lens: expected shape [b] = [2], given [3]"):
        run(d, work, seq_lens=np.array([1, 2, 3], np.int32))
    with pytest.raises(ValueError, match=r"^seq_lens\[1\]: expected 0\.\.32 .*given 33$"):
        run(d, work, seq_lens=np.array([1, 33], np.int32))
    bad_table = work.block_table.copy()
    bad_table[0, 1] = 99
    with raises(ValueError, "block_table[0, 1]: expected a page id in 0.."):
        run(d, work, block_table=bad_table)


def test_block_table_view_is_read_with_its_width(work):
    """A view table[:b, :n] of a wider table: a length beyond the view's n pages is refused, not
    read from the parent's other columns (valid page ids here, so the read would go unnoticed)."""
    d = make_decoder()
    n = work.block_table.shape[1]
    wide = np.zeros((B + 2, n + 6), np.int32)
    wide[:B, :n] = np.maximum(work.block_table, 0)  # every column of the view a valid page
    view = wide[:B, :n]
    np.testing.assert_array_equal(
        run(d, work, block_table=view).view(np.uint16),
        run(d, work).view(np.uint16),
    )
    too_long = work.seq_lens.copy()
    too_long[1] = n * PAGE + 1
    with raises(
        ValueError,
        f"seq_lens[1]: expected 0..{n * PAGE} (the {n} columns of block_table x page_size "
        f"{PAGE}), given {n * PAGE + 1}",
    ):
        run(d, work, block_table=view, seq_lens=too_long)


# The view's last row ends right before a page the process may not touch: reading one column past
# it faulted the process (SIGSEGV). Run in a child so that a fault fails the test, not the run.
GUARD_PAGE_SCRIPT = """
import ctypes, mmap
import numpy as np
import mlakit
from numpy_reference import make_workload

libc = ctypes.CDLL(None)
page = mmap.PAGESIZE
buf = mmap.mmap(-1, 2 * page)
base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
assert libc.mprotect(ctypes.c_void_p(base + page), page, 0) == 0  # PROT_NONE
w = make_workload(np.random.default_rng(0), b=2, s_q=1, h_q=4, page_size=16, seq_lens=[20, 7])
n, stride = 2, 64
ints = np.frombuffer(buf, np.int32, count=page // 4)
first = page // 4 - stride - n  # the second row's n columns end at the guard page
table = np.lib.stride_tricks.as_strided(ints[first:], shape=(2, n), strides=(stride * 4, 4))
table[...] = np.maximum(w.block_table, 0)  # every column of the view a valid page
d = mlakit.Decoder(h_q=4, page_size=16, max_batch=2, max_seq_len=64, backend="cpu")
d.run(w.q, w.kv_cache, table, w.seq_lens)
try:
    d.run(w.q, w.kv_cache, table, np.array([20, n * 16 + 1], np.int32))
except ValueError as e:
    print(e)
"""


def test_block_table_view_before_a_guard_page():
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    result = subprocess.run(
        [sys.executable, "-c", GUARD_PAGE_SCRIPT],
        cwd=here,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("seq_lens[1]: expected 0..32"), result.stdout


def test_out_and_lse_errors(work):
    d = make_decoder()
    with raises(TypeError, "out: expected dtype bfloat16 (or its bits as uint16), given float32"):
        run(d, work, out=np.empty((B, 1, H, 512), np.float32))
    with raises(
        ValueError, "out: expected shape [b, s_q, h_q, 512] = [2, 1, 4, 512], given [2, 1, 4, 576]"
    ):
        run(d, work, out=np.empty((B, 1, H, 576), np.uint16))
    read_only = np.empty((B, 1, H, 512), np.uint16)
    read_only.flags.writeable = False
    with raises(ValueError, "out: expected a writable array, given a read-only numpy array"):
        run(d, work, out=read_only)
    with raises(
        ValueError, "lse: expected None (the decoder was made with lse=False), given numpy.ndarray"
    ):
        run(d, work, lse=np.empty((B, 1, H), np.float32))
    with_lse = make_decoder(lse=True)
    with raises(TypeError, "lse: expected dtype float32, given float64"):
        run(with_lse, work, lse=np.empty((B, 1, H), np.float64))
    with raises(ValueError, "lse: expected shape [b, s_q, h_q] = [2, 1, 4], given [2, 4]"):
        run(with_lse, work, lse=np.empty((B, H), np.float32))


def test_feature_argument_errors(work):
    d = make_decoder()
    with raises(
        ValueError,
        "sinks: expected None (the decoder was made with sinks=False), given numpy.ndarray",
    ):
        run(d, work, sinks=np.zeros(H, np.float32))
    with raises(ValueError, "indices: expected None (the decoder was made with topk=0)"):
        run(d, work, indices=np.zeros((B, 1, 4), np.int32))
    with raises(ValueError, "topk_lens: expected None (the decoder was made with topk=0)"):
        run(d, work, topk_lens=np.zeros(B, np.int32))
    with_sinks = make_decoder(sinks=True)
    with raises(
        TypeError, "sinks: expected an array (the decoder was made with sinks=True), given None"
    ):
        run(with_sinks, work)
    with raises(ValueError, "sinks: expected shape [h_q] = [4], given [5]"):
        run(with_sinks, work, sinks=np.zeros(H + 1, np.float32))
    sparse = make_decoder(topk=4)
    with raises(
        TypeError, "indices: expected an array (the decoder was made with topk=4), given None"
    ):
        run(sparse, work)
    with raises(ValueError, "indices: expected shape [b, s_q, topk] = [2, 1, 4], given [2, 1, 5]"):
        run(sparse, work, indices=np.zeros((B, 1, 5), np.int32))
    slots = work.kv_cache.shape[0] * PAGE
    indices = np.zeros((B, 1, 4), np.int32)
    indices[1, 0, 2] = slots
    with raises(
        ValueError,
        f"indices[1, 0, 2]: expected -1 or a cache slot in 0..{slots - 1}, given {slots}",
    ):
        run(sparse, work, indices=indices)
    with raises(ValueError, "topk_lens[0]: expected 0..4, given 5"):
        run(
            sparse,
            work,
            indices=np.zeros((B, 1, 4), np.int32),
            topk_lens=np.array([5, 0], np.int32),
        )


def test_scale_errors(work):
    d = make_decoder()
    with raises(ValueError, "softmax_scale: expected a finite value > 0, given -1"):
        run(d, work, softmax_scale=-1.0)
    with raises(ValueError, "q_scale: expected none for a bf16 q, given a scale"):
        run(d, work, q_scale=1.0)
    with raises(ValueError, "k_scale: expected none for a bf16 cache, given a scale"):
        run(d, work, k_scale=np.ones(1, np.float32))
    fp8 = make_decoder(q_dtype="fp8", kv_dtype="fp8")
    w8 = make_workload(np.random.default_rng(3), b=1, s_q=1, h_q=H, page_size=PAGE, seq_lens=[3],
                       q_dtype="fp8_e4m3", kv_dtype="fp8_e4m3")  # fmt: skip
    with raises(
        ValueError, "q_scale: expected a scale (host value or pointer) for an fp8 q, given none"
    ):
        run(fp8, w8, k_scale=1.0)
    with raises(ValueError, "k_scale: expected a finite value > 0, given 0"):
        run(fp8, w8, q_scale=1.0, k_scale=0.0)
    with raises(
        TypeError, "q_scale: expected None, a float or a one-element float32 array, given str"
    ):
        run(fp8, w8, q_scale="1", k_scale=1.0)
    with raises(ValueError, "q_scale: expected a one-element float32 array, given shape [2]"):
        run(fp8, w8, q_scale=np.ones(2, np.float32), k_scale=1.0)
    with raises(TypeError, "k_scale: expected dtype float32, given float64"):
        run(fp8, w8, q_scale=1.0, k_scale=np.ones(1, np.float64))
    with raises(TypeError, "q: expected dtype float8_e4m3fn (or its bits as uint8), given int8"):
        run(fp8, w8, q=w8.q.view(np.int8), q_scale=1.0, k_scale=1.0)
    # By array (a pointer, in host memory for the cpu backend), the backend reads the value and
    # refuses it: 0, negative, NaN and inf alike.
    for bad in (0.0, -1.0, np.nan, np.inf):
        with raises(ValueError, "q_scale_ptr[0]: expected a finite value > 0, given "):
            run(fp8, w8, q_scale=np.array([bad], np.float32), k_scale=1.0)


def test_nan_sink_is_refused(work):
    with_sinks = make_decoder(sinks=True)
    sinks = np.zeros(H, np.float32)
    sinks[1] = np.nan
    with raises(ValueError, "sinks[1]: expected a logit, not NaN (-inf: no sink), given nan"):
        run(with_sinks, work, sinks=sinks)


def test_workspace_and_stream_errors(work):
    d = make_decoder()
    with raises(
        TypeError,
        "workspace: " + NOT_AN_ARRAY + ", given object",
    ):
        run(d, work, workspace=object())
    run(d, work, workspace=np.empty(0, np.uint8))  # the cpu backend needs 0 bytes
    with raises(TypeError, "stream: expected None, an int (cudaStream_t), a torch.cuda.Stream"):
        run(d, work, stream="default")
