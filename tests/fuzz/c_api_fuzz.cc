// Fuzz target: the C API's validation and the cpu backend behind it. The input chooses a problem
// (mostly valid values, sometimes any), the run arguments and their host buffers, each allocated
// at the size the arguments claim (so a read or write past one is the library's, and ASan reports
// it), with random contents from a seed in the input: page ids, lengths, indices, query offsets
// (var_q), scales and sinks may be anything, though mostly near their valid ranges.
// Pointers may be null, misaligned, or point into another argument. Every call must return a
// status, with a message exactly when it failed; no run writes an input, and a refused run leaves
// out as it was.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "mlakit/mlakit.h"
#include "mlakit/mlakit_c.h"

namespace {

using mlakit_fuzz::Input;

size_t dtype_bytes(int32_t dtype) {
  return dtype == MLAKIT_FP8_E4M3 ? 1 : dtype == MLAKIT_FP32 ? 4 : 2;
}

// Buffer contents: random bits from a seed the input gives (the input's bytes go to decisions;
// a 147 KB q would use them all up).
struct Bits {
  uint64_t state;
  uint64_t next() {  // splitmix64
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

// A buffer of `bytes` (16-byte aligned, as an allocator gives), of random bits.
struct Buffer {
  std::vector<uint8_t> storage;
  uint8_t* data = nullptr;
  size_t bytes = 0;
};

Buffer make_buffer(Bits& bits, size_t bytes) {
  Buffer b;
  b.storage.resize(bytes + 32);  // room to align, and for a pointer misaligned by 1..3
  b.data = b.storage.data() + (-reinterpret_cast<uintptr_t>(b.storage.data()) & 15);
  b.bytes = bytes;
  for (size_t i = 0; i < bytes; ++i) b.data[i] = static_cast<uint8_t>(bits.next());
  return b;
}

// int32 contents (page ids, lengths, indices): mostly in [lo, hi], one in 16 any value.
void fill_ints(Bits& bits, Buffer& b, int32_t lo, int32_t hi) {
  auto* v = reinterpret_cast<int32_t*>(b.data);
  for (size_t i = 0; i < b.bytes / 4; ++i) {
    const uint64_t r = bits.next();
    v[i] = (r & 15) != 0 ? static_cast<int32_t>(lo + (r >> 4) % (uint64_t(hi - lo) + 1))
                         : static_cast<int32_t>(r >> 32);
  }
}

// The arguments passed so far: pointer, and the bytes its shape covers.
struct Passed {
  const uint8_t* ptr;
  size_t bytes;
};

// The pointer passed for a buffer (whose argument's shape covers `bytes` of it): the buffer,
// null, misaligned, or, for a buffer the library writes, inside the shape of an argument passed
// before it, which the library must refuse. (An input inside another input is no error, and a
// written buffer inside memory no argument names would be the harness lying about sizes.)
const void* choose(Input& in, const Buffer& own, size_t bytes, std::vector<Passed>* passed,
                   bool written = false) {
  const uint8_t* ptr = own.data;
  switch (in.raw<uint8_t>() % 32) {
    case 1: ptr = nullptr; break;
    case 2: ptr = own.data + 1 + in.in(0, 2); break;
    case 3:
      if (written && !passed->empty()) {
        const Passed& other = (*passed)[in.in(0, static_cast<int64_t>(passed->size()) - 1)];
        if (other.ptr != nullptr && other.bytes > 0) {
          ptr = other.ptr + in.in(0, static_cast<int64_t>(other.bytes) - 1) / 16 * 16;
        }
      }
      break;
  }
  passed->push_back({ptr, bytes});
  return ptr;
}

// A count the arguments claim for a buffer of `real` elements: the truth, less (the buffer is
// then larger than needed), or a value validation must refuse. Never a larger valid count: that
// would be the harness lying about the buffer.
int64_t claim(Input& in, int64_t real) {
  switch (in.raw<uint8_t>() % 16) {
    case 1: return in.in(1, real);
    case 2: return 0;
    case 3: return -in.in(1, 1000);
    case 4: return int64_t{INT32_MAX} + 1 + in.raw<uint16_t>();
    case 5: return INT64_MIN;
    default: return real;
  }
}

float scale(Input& in) {
  switch (in.raw<uint8_t>() % 8) {
    case 0: return NAN;
    case 1: return in.raw<float>();
    case 2: return 0.0f;
    case 3: return -1.0f;
    case 4: return INFINITY;
    default: return 0.5f;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  mlakit_problem_t p;
  mlakit_problem_init(&p);
  p.h_q = in.pick({1, 2, 4, 8, 16, 128});
  p.s_q = in.pick({1, 2, 3});
  p.page_size = in.pick({1, 16, 64, 48});
  p.max_batch = in.pick({1, 2, 3, 300});
  p.max_seq_len = in.pick({0, 1, 17, 64, 200});
  const uint8_t types = in.raw<uint8_t>();
  const int32_t dtypes[] = {MLAKIT_BF16, MLAKIT_FP16, MLAKIT_FP8_E4M3, MLAKIT_FP32};
  p.kv_dtype = dtypes[types % 4];
  p.q_dtype = (types >> 2) % 4 == 0 ? p.kv_dtype : dtypes[(types >> 2) % 4];
  p.out_dtype = (types >> 4) % 2 ? MLAKIT_BF16 : MLAKIT_FP16;
  const int layout = (types >> 5) % 4;
  p.kv_layout = layout == 0   ? MLAKIT_KV_FP8_BLOCKWISE
                : layout == 1 ? MLAKIT_KV_FP8_V4
                              : MLAKIT_KV_DENSE;
  if (p.kv_layout == MLAKIT_KV_FP8_V4) p.d_qk = 512;
  if ((types >> 7) && in.flag()) p.kv_layout = in.raw<int32_t>();
  p.causal = in.flag();
  p.has_sinks = in.flag();
  p.return_lse = in.flag();
  p.topk = in.flag() ? in.pick({1, 5, 16}) : 0;
  p.var_q = in.flag() ? 1 : 0;
  if (in.raw<uint8_t>() == 255) p.d_qk = in.raw<int32_t>();

  const char* backends[] = {"cpu", "cpu", "cpu", "auto", "", "sm80", "nope"};
  mlakit_decoder_t* decoder = nullptr;
  const mlakit_status_t created = mlakit_decoder_create(&p, backends[in.in(0, 6)], &decoder);
  if (created != 0 || decoder == nullptr || std::string(mlakit_decoder_backend(decoder)) != "cpu") {
    if ((created == 0) != (decoder != nullptr)) std::abort();  // a decoder iff success
    mlakit_decoder_destroy(decoder);
    return 0;
  }

  // The run's shape, and its cost: the cpu backend computes it all, so keep it small.
  const int32_t batch = in.pick({1, 2, 3});
  const int64_t num_pages = in.in(1, 8);
  const int64_t stride = in.in(1, 6);
  const int64_t rows = int64_t{batch} * p.s_q * p.h_q;
  const int64_t visible =
      p.topk > 0 ? p.topk : std::min<int64_t>(p.max_seq_len, stride * p.page_size);
  if (batch < 1 || batch > p.max_batch || rows * visible > (1 << 14) || rows > 4096) {
    mlakit_decoder_destroy(decoder);
    return 0;
  }
  // Bytes of a page: V4 pages hold 584 bytes a token, padded to a multiple of 576.
  const size_t page = p.kv_layout == MLAKIT_KV_FP8_V4 ? (p.page_size * 584 + 575) / 576 * 576
                      : p.kv_layout == MLAKIT_KV_FP8_BLOCKWISE
                          ? p.page_size * 656
                          : p.page_size * 576 * dtype_bytes(p.kv_dtype);
  Bits bits{in.raw<uint32_t>()};
  // var_q's offsets: mostly valid (0, then query lengths 0..s_q), one in 16 with an entry of any
  // value. Valid ones give the packed rows' count: the rows q and the indices then hold (the rest
  // of their buffers is no argument's).
  Buffer cu = make_buffer(bits, (batch + 1) * 4);
  auto* offsets = reinterpret_cast<int32_t*>(cu.data);
  offsets[0] = 0;
  for (int i = 0; i < batch; ++i) {
    offsets[i + 1] = offsets[i] + static_cast<int32_t>(bits.next() % (p.s_q + 1));
  }
  if ((bits.next() & 15) == 0)
    offsets[bits.next() % (batch + 1)] = static_cast<int32_t>(bits.next());
  bool offsets_valid = offsets[0] == 0;
  for (int i = 0; i < batch; ++i) {
    const int64_t q_len = int64_t{offsets[i + 1]} - offsets[i];
    offsets_valid = offsets_valid && q_len >= 0 && q_len <= p.s_q;
  }
  const int64_t q_rows = p.var_q && offsets_valid ? offsets[batch] : int64_t{batch} * p.s_q;
  Buffer q = make_buffer(bits, rows * p.d_qk * dtype_bytes(p.q_dtype));
  Buffer kv = make_buffer(bits, num_pages * page);
  Buffer table = make_buffer(bits, batch * stride * 4);
  fill_ints(bits, table, -1, static_cast<int32_t>(num_pages));
  Buffer lens = make_buffer(bits, batch * 4);
  fill_ints(bits, lens, -1, static_cast<int32_t>(stride * p.page_size + 1));
  Buffer indices = make_buffer(bits, rows / p.h_q * std::max(p.topk, 0) * 4);
  fill_ints(bits, indices, -2, static_cast<int32_t>(num_pages * p.page_size));
  Buffer topk_lens = make_buffer(bits, batch * 4);
  fill_ints(bits, topk_lens, -1, p.topk + 1);
  Buffer sinks = make_buffer(bits, p.h_q * 4);
  Buffer out = make_buffer(bits, rows * 512 * dtype_bytes(p.out_dtype));
  Buffer lse = make_buffer(bits, rows * 4);
  Buffer q_scale = make_buffer(bits, 4), k_scale = make_buffer(bits, 4);
  // The counts the arguments claim, then the bytes each argument's shape then covers (0 for a
  // claim validation must refuse): a written buffer placed inside one of them must be refused.
  const int64_t pages_claimed = claim(in, num_pages);
  const int64_t stride_claimed = claim(in, stride);
  const size_t kv_bytes =
      pages_claimed >= 1 && pages_claimed <= num_pages ? pages_claimed * page : 0;
  // A sparse run ignores the block table and lengths: they are not arguments it can race with.
  const bool dense = p.topk == 0;
  const size_t table_bytes =
      dense && stride_claimed >= 1 && stride_claimed <= stride ? batch * stride_claimed * 4 : 0;
  std::vector<Passed> all;
  mlakit_run_args_t a;
  mlakit_run_args_init(&a);
  a.batch = batch;
  a.q = choose(in, q, q_rows * p.h_q * p.d_qk * dtype_bytes(p.q_dtype), &all);
  a.kv_cache = choose(in, kv, kv_bytes, &all);
  a.num_pages = pages_claimed;
  a.block_table = static_cast<const int32_t*>(choose(in, table, table_bytes, &all));
  a.block_table_stride = stride_claimed;
  a.seq_lens = static_cast<const int32_t*>(choose(in, lens, dense ? lens.bytes : 0, &all));
  if (p.topk > 0 || in.raw<uint8_t>() == 255) {
    a.indices =
        static_cast<const int32_t*>(choose(in, indices, q_rows * std::max(p.topk, 0) * 4, &all));
    if (in.flag()) {
      a.topk_lens = static_cast<const int32_t*>(choose(in, topk_lens, topk_lens.bytes, &all));
    }
  }
  if (p.var_q || in.raw<uint8_t>() == 255) {
    a.cu_seqlens_q = static_cast<const int32_t*>(choose(in, cu, cu.bytes, &all));
  }
  if (p.has_sinks || in.raw<uint8_t>() == 255) {
    a.sinks = static_cast<const float*>(choose(in, sinks, sinks.bytes, &all));
  }
  if (in.flag()) a.q_scale_ptr = static_cast<const float*>(choose(in, q_scale, 4, &all));
  if (in.flag()) a.k_scale_ptr = static_cast<const float*>(choose(in, k_scale, 4, &all));
  const size_t inputs = all.size();
  a.out = const_cast<void*>(choose(in, out, out.bytes, &all, /*written=*/true));
  if (p.return_lse || in.raw<uint8_t>() == 255) {
    a.lse = static_cast<float*>(const_cast<void*>(choose(in, lse, lse.bytes, &all, true)));
  }
  a.softmax_scale = in.flag() ? scale(in) : a.softmax_scale;
  a.q_scale = scale(in);
  a.k_scale = scale(in);

  // The inputs as they were, and out: a run writes neither an input (that would be an overlap it
  // let through) nor, when it is refused, out.
  std::vector<std::vector<uint8_t>> before;
  for (size_t i = 0; i < inputs; ++i) {
    const Passed& x = all[i];
    before.emplace_back(x.ptr, x.ptr == nullptr ? x.ptr : x.ptr + x.bytes);
  }
  const std::vector<uint8_t> out_before(out.data, out.data + out.bytes);
  const mlakit_status_t ran = mlakit_decoder_run(decoder, &a, nullptr, 0, nullptr);
  if ((ran == 0) != (mlakit_last_error()[0] == '\0')) std::abort();  // a message iff failure
  for (size_t i = 0; i < inputs; ++i) {
    if (all[i].ptr != nullptr && !std::equal(before[i].begin(), before[i].end(), all[i].ptr)) {
      std::abort();
    }
  }
  if (ran != 0 && !std::equal(out_before.begin(), out_before.end(), out.data)) std::abort();
  mlakit_decoder_destroy(decoder);
  return 0;
}
