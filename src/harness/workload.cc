// Synthetic workloads on the host (harness/workload.h): random inputs of a problem's shape in
// storage form, poisoned where nothing should be read, and the sequence lengths they are made for.
// The context-parallel shards are in workload_cp.cc, the copies on the device in
// workload_device.cc.
#include "harness/workload.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/numeric.h"
#include "core/parallel.h"

namespace mlakit::harness {
namespace {

// Counter-based random numbers (splitmix64 of seed, stream and index): any element can be drawn
// independently, so large caches are filled in parallel and reproducibly.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Rng {
  uint64_t seed;
  uint64_t bits(uint64_t stream, uint64_t i) const {
    return mix(seed ^ mix(stream * 0x100000001b3ull + i));
  }
  double uniform(uint64_t stream, uint64_t i) const {
    return static_cast<double>(bits(stream, i) >> 11) * 0x1.0p-53;
  }
  // Approximately standard normal: a sum of four uniforms, rescaled.
  float normal(uint64_t stream, uint64_t i) const {
    const uint64_t b = bits(stream, i);
    double s = 0;
    for (int k = 0; k < 4; ++k) s += static_cast<double>((b >> (16 * k)) & 0xffff) / 65536.0;
    return static_cast<float>((s - 2.0) * 1.7320508075688772);
  }
};

enum Stream : uint64_t { kQ = 1, kKv, kPerm, kLens, kIdx, kSinks, kScales, kExtraKv, kExtraPerm };

void store(uint8_t* dst, int64_t i, DType dtype, float v) {
  switch (dtype) {
    case DType::kBF16: reinterpret_cast<uint16_t*>(dst)[i] = float_to_bf16(v); break;
    case DType::kFP16: reinterpret_cast<uint16_t*>(dst)[i] = float_to_fp16(v); break;
    case DType::kFP8E4M3: dst[i] = float_to_e4m3(v); break;
    case DType::kFP32: reinterpret_cast<float*>(dst)[i] = v; break;
  }
}

void store_bf16(uint8_t* dst, float v) {
  const uint16_t bits = float_to_bf16(v);
  std::memcpy(dst, &bits, sizeof(bits));
}

// One cache, as fill_token sees it: where its pages are and which random stream fills it.
struct CacheFill {
  uint8_t* data;
  int32_t page_size;
  size_t page_bytes;
  uint64_t stream;
};

// The V4 UE8M0 exponent of a group whose largest magnitude is `amax`: the smallest power of two
// that brings amax within e4m3's 448.
uint8_t v4_exponent(float amax) {
  if (!(amax > 0)) return 127;
  const int e = 127 + static_cast<int>(std::ceil(std::log2(amax / 448.0f)));
  return static_cast<uint8_t>(std::clamp(e, 0, 254));
}

void fill_token(const Problem& p, const Rng& rng, const HostInputs& in, const CacheFill& c,
                int64_t slot, float magnitude) {
  const uint64_t base = static_cast<uint64_t>(slot) * kDqk;
  uint8_t* page = c.data + slot / c.page_size * c.page_bytes;
  const int64_t offset = slot % c.page_size;
  if (p.kv_layout == KvLayout::kFp8V4) {
    uint8_t* row = page + offset * kV4DataBytes;
    uint8_t* scales = page + static_cast<int64_t>(c.page_size) * kV4DataBytes + offset * 8;
    float values[kV4Nope];
    for (int d = 0; d < kV4Nope; ++d) values[d] = rng.normal(c.stream, base + d) * magnitude;
    for (int g = 0; g < kV4Nope / kV4Group; ++g) {
      float amax = 0;
      for (int d = 0; d < kV4Group; ++d) amax = std::max(amax, std::fabs(values[g * kV4Group + d]));
      scales[g] = v4_exponent(amax);
      const float scale = std::ldexp(1.0f, scales[g] - 127);
      for (int d = g * kV4Group; d < (g + 1) * kV4Group; ++d) {
        row[d] = float_to_e4m3(values[d] / scale);
      }
    }
    scales[kV4ScaleBytes - 1] = 0xff;  // the pad byte: a NaN scale if anything used it
    for (int d = 0; d < kDRope; ++d) {
      store_bf16(row + kV4Nope + 2 * d, rng.normal(c.stream, base + kV4Nope + d) * magnitude);
    }
    return;
  }
  const size_t token_bytes = kv_token_bytes(p.kv_dtype, p.kv_layout);
  uint8_t* row = page + offset * token_bytes;
  if (p.kv_layout == KvLayout::kFp8Blockwise) {
    float values[kDv];
    float scales[kDv / kBlockwiseGroup];
    for (int d = 0; d < kDv; ++d) values[d] = rng.normal(c.stream, base + d) * magnitude;
    for (int g = 0; g < kDv / kBlockwiseGroup; ++g) {
      float amax = 0;
      for (int d = 0; d < kBlockwiseGroup; ++d) {
        amax = std::max(amax, std::fabs(values[g * kBlockwiseGroup + d]));
      }
      // A power of two, as DeepSeek's quantizer rounds it (and so exact in bf16 after widening).
      scales[g] = amax > 0 ? std::exp2(std::ceil(std::log2(amax / 448.0f))) : 1.0f;
    }
    for (int d = 0; d < kDv; ++d) row[d] = float_to_e4m3(values[d] / scales[d / kBlockwiseGroup]);
    std::memcpy(row + kDv, scales, sizeof(scales));
    uint8_t* rope = row + kDv + sizeof(scales);
    for (int d = 0; d < kDRope; ++d) {
      store_bf16(rope + 2 * d, rng.normal(c.stream, base + kDv + d) * magnitude);
    }
    return;
  }
  const float inv_scale = p.kv_dtype == DType::kFP8E4M3 ? 1.0f / in.k_scale : 1.0f;
  for (int d = 0; d < kDqk; ++d) {
    store(row, d, p.kv_dtype, rng.normal(c.stream, base + d) * magnitude * inv_scale);
  }
}

void fill_nan_token(const Problem& p, const CacheFill& c, int64_t slot) {
  uint8_t* page = c.data + slot / c.page_size * c.page_bytes;
  const int64_t offset = slot % c.page_size;
  const uint16_t bf16_nan = 0x7fc0;
  if (p.kv_layout == KvLayout::kFp8V4) {
    uint8_t* row = page + offset * kV4DataBytes;
    std::memset(row, 0x7f, kV4Nope);  // e4m3 NaN
    for (int d = 0; d < kDRope; ++d) std::memcpy(row + kV4Nope + 2 * d, &bf16_nan, 2);
    std::memset(page + static_cast<int64_t>(c.page_size) * kV4DataBytes + offset * 8, 0xff, 8);
    return;
  }
  uint8_t* row = page + offset * kv_token_bytes(p.kv_dtype, p.kv_layout);
  if (p.kv_layout == KvLayout::kFp8Blockwise) {
    std::memset(row, 0x7f, kDv);  // e4m3 NaN
    const float nan = NAN;
    for (int g = 0; g < kDv / kBlockwiseGroup; ++g) std::memcpy(row + kDv + 4 * g, &nan, 4);
    for (int d = 0; d < kDRope; ++d) std::memcpy(row + kDv + 16 + 2 * d, &bf16_nan, 2);
    return;
  }
  fill_nan(row, kDqk, p.kv_dtype);
}

// Fills a cache of `num_pages` pages: slot `s` gets random values when used(s) (or when `poison`
// is off), NaN otherwise; the V4 padding at each page's end gets 0xff.
template <typename Used>
void fill_cache(const Problem& p, const Rng& rng, const HostInputs& in, const CacheFill& c,
                int64_t num_pages, float magnitude, bool poison, const Used& used) {
  const size_t page_used =
      static_cast<size_t>(c.page_size) * kv_token_bytes(p.kv_dtype, p.kv_layout);
  parallel_for(num_pages, [&](int64_t page) {
    for (int64_t o = 0; o < c.page_size; ++o) {
      const int64_t slot = page * c.page_size + o;
      if (used(page, o) || !poison) {
        fill_token(p, rng, in, c, slot, magnitude);
      } else {
        fill_nan_token(p, c, slot);
      }
    }
    std::memset(c.data + page * c.page_bytes + page_used, 0xff, c.page_bytes - page_used);
  });
}

// A random permutation of 0..n-1.
std::vector<int32_t> permutation(const Rng& rng, uint64_t stream, int64_t n) {
  std::vector<int32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t k = n - 1; k > 0; --k) {
    std::swap(perm[k], perm[static_cast<int64_t>(rng.uniform(stream, k) * (k + 1))]);
  }
  return perm;
}

// Pages of the extra cache each request's window takes.
int64_t extra_pages_per_request(const Problem& p) {
  const int64_t eps = p.extra_page_size_or_default();
  return (p.extra_topk + eps - 1) / eps;
}

// The extra cache and its indices (make_inputs): request i's window is extra_topk consecutive
// slots of its own pages, listed in order with some slots -1.
void make_extra(const Problem& p, const Rng& rng, const WorkloadOptions& opt, HostInputs* in) {
  const int32_t eps = p.extra_page_size_or_default();
  const int64_t per_request = extra_pages_per_request(p);
  in->extra_num_pages = std::max<int64_t>(1, in->batch * per_request + opt.extra_pages);
  const std::vector<int32_t> perm = permutation(rng, kExtraPerm, in->extra_num_pages);
  std::vector<int64_t> window_page(in->extra_num_pages, -1);  // page -> its window position
  for (int64_t k = 0; k < in->batch * per_request; ++k) window_page[perm[k]] = k % per_request;
  const size_t page_bytes = kv_page_bytes(p.kv_dtype, p.kv_layout, eps);
  in->extra_kv.resize(static_cast<size_t>(in->extra_num_pages) * page_bytes);
  const CacheFill c{
      .data = in->extra_kv.data(), .page_size = eps, .page_bytes = page_bytes, .stream = kExtraKv};
  fill_cache(p, rng, *in, c, in->extra_num_pages, opt.magnitude, opt.poison,
             [&](int64_t page, int64_t o) {
               return window_page[page] >= 0 && window_page[page] * eps + o < p.extra_topk;
             });
  in->extra_indices.resize(static_cast<size_t>(in->batch) * p.s_q * p.extra_topk);
  for (int i = 0; i < in->batch; ++i) {
    for (int t = 0; t < p.s_q; ++t) {
      for (int64_t k = 0; k < p.extra_topk; ++k) {
        const uint64_t id = (static_cast<uint64_t>(i) * p.s_q + t) * p.extra_topk + k;
        const bool empty = rng.uniform(kIdx, 3 * id + 3000017) < opt.sparse_empty;
        const int64_t page = perm[i * per_request + k / eps];
        in->extra_indices[id] = empty ? -1 : static_cast<int32_t>(page * eps + k % eps);
      }
    }
    if (opt.topk_lens) {
      in->extra_topk_lens.push_back(
          static_cast<int32_t>(rng.uniform(kLens, 4000037 + i) * (p.extra_topk + 1)));
    }
  }
}

// var_q (make_inputs): the query lengths and offsets, and the rows (i, t < q_len_i) of q and the
// indices moved to packed row cu[i] + t (never after their uniform row i * s_q + t, so in order);
// the rows past the packed ones poisoned.
void pack_query_rows(const Rng& rng, const WorkloadOptions& opt, HostInputs* in) {
  const Problem& p = in->problem;
  const int b = in->batch;
  in->cu_seqlens_q.assign(b + 1, 0);
  for (int i = 0; i < b; ++i) {
    const int32_t q_len =
        !opt.q_lens.empty()
            ? opt.q_lens[i]
            : 1 + std::min(p.s_q - 1,
                           static_cast<int32_t>(rng.uniform(kLens, 5000011 + i) * p.s_q));
    in->cu_seqlens_q[i + 1] = in->cu_seqlens_q[i] + q_len;
  }
  const int64_t total = in->cu_seqlens_q[b];
  const auto pack = [&](uint8_t* data, size_t row_bytes) {
    for (int i = 0; i < b; ++i) {
      const int64_t q_len = in->cu_seqlens_q[i + 1] - in->cu_seqlens_q[i];
      std::memmove(data + in->cu_seqlens_q[i] * row_bytes,
                   data + static_cast<int64_t>(i) * p.s_q * row_bytes, q_len * row_bytes);
    }
  };
  const size_t q_row = static_cast<size_t>(p.h_q) * p.d_qk * dtype_bytes(p.q_dtype);
  pack(in->q.data(), q_row);
  fill_nan(in->q.data() + total * q_row, (in->q.size() - total * q_row) / dtype_bytes(p.q_dtype),
           p.q_dtype);
  const int32_t bad_index = std::numeric_limits<int32_t>::max();
  if (p.sparse()) {
    pack(reinterpret_cast<uint8_t*>(in->indices.data()), p.topk * sizeof(int32_t));
    std::fill(in->indices.begin() + total * p.topk, in->indices.end(), bad_index);
  }
  if (p.has_extra()) {
    pack(reinterpret_cast<uint8_t*>(in->extra_indices.data()), p.extra_topk * sizeof(int32_t));
    std::fill(in->extra_indices.begin() + total * p.extra_topk, in->extra_indices.end(), bad_index);
  }
}

}  // namespace

size_t HostInputs::out_bytes() const {
  return static_cast<size_t>(batch) * problem.s_q * problem.h_q * kDv *
         dtype_bytes(problem.out_dtype);
}

size_t HostInputs::lse_count() const {
  return static_cast<size_t>(batch) * problem.s_q * problem.h_q;
}

RunArgs HostInputs::args(void* out, float* lse) const {
  RunArgs a;
  a.batch = batch;
  a.q = q.data();
  a.kv_cache = kv.data();
  a.num_pages = num_pages;
  if (!problem.sparse()) {
    a.block_table = block_table.data();
    a.block_table_stride = block_table_stride;
    a.seq_lens = seq_lens.data();
  } else {
    a.indices = indices.data();
    a.topk_lens = topk_lens.empty() ? nullptr : topk_lens.data();
  }
  if (problem.has_extra()) {
    a.extra_kv_cache = extra_kv.data();
    a.extra_num_pages = extra_num_pages;
    a.extra_indices = extra_indices.data();
    a.extra_topk_lens = extra_topk_lens.empty() ? nullptr : extra_topk_lens.data();
  }
  a.sinks = sinks.empty() ? nullptr : sinks.data();
  a.cu_seqlens_q = problem.var_q ? cu_seqlens_q.data() : nullptr;
  a.out = out;
  a.lse = problem.return_lse ? lse : nullptr;
  a.softmax_scale = softmax_scale;
  a.q_scale = q_scale;
  a.k_scale = k_scale;
  return a;
}

std::vector<int32_t> make_seq_lens(int batch, int len, bool variable, uint64_t seed) {
  std::vector<int32_t> lens(batch, len);
  if (!variable) return lens;
  const Rng rng{seed};
  // In 64 bits: 2 * len overflows an int from 2^30 on.
  const int64_t lo = std::max(1, len / 8), hi = std::max<int64_t>(lo + 1, 2 * int64_t{len});
  for (int i = 0; i < batch; ++i) {
    lens[i] = static_cast<int32_t>(lo + static_cast<int64_t>(rng.uniform(kLens, i) * (hi - lo)));
  }
  return lens;
}

int64_t longest_seq_len(int len, bool variable) {
  if (!variable) return len;
  const int64_t lo = std::max(1, len / 8);
  return std::max<int64_t>(lo + 1, 2 * int64_t{len}) - 1;
}

namespace {

// The sizes of make_inputs's buffers for these lengths.
struct InputSizes {
  uint64_t pages = 0, q = 0, kv = 0, block_table = 0, seq_lens = 0, indices = 0, topk_lens = 0,
           sinks = 0, extra = 0;  // extra: the extra cache, its indices and lengths
  uint64_t total() const {
    return q + kv + block_table + seq_lens + indices + topk_lens + sinks + extra;
  }
};

InputSizes input_sizes(const Problem& p, std::span<const int32_t> lens,
                       const WorkloadOptions& opt) {
  InputSizes s;
  uint64_t max_pages = 0;
  for (const int32_t len : lens) {
    const uint64_t pages =
        (static_cast<uint64_t>(std::max(len, 0)) + p.page_size - 1) / p.page_size;
    s.pages += pages;
    max_pages = std::max(max_pages, pages);
  }
  s.pages = std::max<uint64_t>(s.pages + opt.extra_pages, 1);
  const uint64_t b = lens.size();
  s.q = b * p.s_q * p.h_q * p.d_qk * dtype_bytes(p.q_dtype);
  s.kv = s.pages * kv_page_bytes(p.kv_dtype, p.kv_layout, p.page_size);
  s.block_table = b * std::max<uint64_t>(1, max_pages + opt.extra_block_slots) * sizeof(int32_t);
  s.seq_lens = b * sizeof(int32_t);
  s.indices = p.sparse() ? b * p.s_q * p.topk * sizeof(int32_t) : 0;
  s.topk_lens = p.sparse() && opt.topk_lens ? b * sizeof(int32_t) : 0;
  s.sinks = p.has_sinks ? p.h_q * sizeof(float) : 0;
  if (p.has_extra()) {
    const uint64_t pages = std::max<uint64_t>(1, b * extra_pages_per_request(p) + opt.extra_pages);
    s.extra = pages * kv_page_bytes(p.kv_dtype, p.kv_layout, p.extra_page_size_or_default()) +
              b * p.s_q * p.extra_topk * sizeof(int32_t) +
              (opt.topk_lens ? b * sizeof(int32_t) : 0);
  }
  return s;
}

}  // namespace

uint64_t input_bytes(const Problem& p, std::span<const int32_t> lens, const WorkloadOptions& opt) {
  const InputSizes s = input_sizes(p, lens, opt);
  // make_inputs's scratch: the first page of each request, the page permutation and owners.
  uint64_t scratch =
      (lens.size() + 1) * sizeof(int64_t) + s.pages * (sizeof(int32_t) + sizeof(int64_t));
  if (p.has_extra()) {  // the extra cache's permutation and page owners
    scratch += (lens.size() * extra_pages_per_request(p) + opt.extra_pages + 1) *
               (sizeof(int32_t) + sizeof(int64_t));
  }
  return s.total() + scratch;
}

uint64_t device_input_bytes(const Problem& p, std::span<const int32_t> lens,
                            const WorkloadOptions& opt) {
  const InputSizes s = input_sizes(p, lens, opt);
  const uint64_t rows = lens.size() * p.s_q * p.h_q;
  return s.total() + rows * (kDv * dtype_bytes(p.out_dtype) + sizeof(float));  // out and lse
}

std::vector<int32_t> make_ragged_lens(int batch, int len, uint64_t seed) {
  std::vector<int32_t> lens(batch, len);
  if (batch < 2) return lens;
  const int64_t lo = std::max(1, len / 16), hi = std::max<int64_t>(lo, len);
  for (int i = 0; i < batch; ++i) {  // i = batch - 1 is the longest, exactly hi
    lens[i] = static_cast<int32_t>(lo + (hi - lo) * i / (batch - 1));
  }
  const Rng rng{seed};
  for (int k = batch - 1; k > 0; --k) {
    std::swap(lens[k], lens[static_cast<int>(rng.uniform(kLens, 2000003 + k) * (k + 1))]);
  }
  return lens;
}

void fill_nan(void* data, size_t count, DType dtype) {
  switch (dtype) {
    case DType::kBF16: std::fill_n(static_cast<uint16_t*>(data), count, uint16_t{0x7fc0}); break;
    case DType::kFP16: std::fill_n(static_cast<uint16_t*>(data), count, uint16_t{0x7e00}); break;
    case DType::kFP8E4M3: std::fill_n(static_cast<uint8_t*>(data), count, uint8_t{0x7f}); break;
    case DType::kFP32: std::fill_n(static_cast<float*>(data), count, NAN); break;
  }
}

HostInputs make_inputs(const Problem& p, std::span<const int32_t> lens,
                       const WorkloadOptions& opt) {
  const Rng rng{opt.seed};
  HostInputs in;
  in.problem = p;
  in.batch = static_cast<int32_t>(lens.size());
  in.seq_lens.assign(lens.begin(), lens.end());
  if (p.kv_layout == KvLayout::kFp8V4) in.softmax_scale = kV4SoftmaxScale;
  if (p.q_dtype == DType::kFP8E4M3) in.q_scale = 0.0625f;
  if (p.kv_dtype == DType::kFP8E4M3 && p.kv_layout == KvLayout::kDense) in.k_scale = 0.03125f;
  if (p.has_sinks) {
    in.sinks.resize(p.h_q);
    for (int h = 0; h < p.h_q; ++h) {
      // Every eighth head gets -inf (no effect); the rest a logit comparable to the lse.
      in.sinks[h] = h % 8 == 7 ? -std::numeric_limits<float>::infinity()
                               : 2.0f + 2.0f * rng.normal(kSinks, h);
    }
  }

  // Pages: each request gets ceil(L / page_size) pages at random places in the cache.
  std::vector<int64_t> first_page(in.batch + 1, 0);
  int64_t max_pages = 0;
  for (int i = 0; i < in.batch; ++i) {
    const int64_t pages = (static_cast<int64_t>(lens[i]) + p.page_size - 1) / p.page_size;
    first_page[i + 1] = first_page[i] + pages;
    max_pages = std::max(max_pages, pages);
  }
  in.num_pages = first_page[in.batch] + opt.extra_pages;
  in.num_pages = std::max<int64_t>(in.num_pages, 1);
  in.block_table_stride = std::max<int64_t>(1, max_pages + opt.extra_block_slots);
  const std::vector<int32_t> perm = permutation(rng, kPerm, in.num_pages);
  in.block_table.assign(in.batch * in.block_table_stride,
                        static_cast<int32_t>(in.num_pages + 7919));
  std::vector<int64_t> page_owner(in.num_pages, -1);  // request index * 2^20 + page in request
  for (int i = 0; i < in.batch; ++i) {
    for (int64_t j = 0; j < first_page[i + 1] - first_page[i]; ++j) {
      const int32_t page = perm[first_page[i] + j];
      in.block_table[i * in.block_table_stride + j] = page;
      page_owner[page] = (static_cast<int64_t>(i) << 20) | j;
    }
  }

  // Cache contents: random values in used slots, NaN in unused pages and page tails.
  const size_t page_bytes = kv_page_bytes(p.kv_dtype, p.kv_layout, p.page_size);
  in.kv.resize(static_cast<size_t>(in.num_pages) * page_bytes);
  const CacheFill main{
      .data = in.kv.data(), .page_size = p.page_size, .page_bytes = page_bytes, .stream = kKv};
  // Sparse problems address slots directly: keep every slot finite so that any index is valid.
  fill_cache(p, rng, in, main, in.num_pages, opt.magnitude, opt.poison && !p.sparse(),
             [&](int64_t page, int64_t o) {
               if (page_owner[page] < 0) return false;
               const int64_t i = page_owner[page] >> 20, j = page_owner[page] & 0xfffff;
               return j * p.page_size + o < lens[i];
             });

  const int64_t q_count = static_cast<int64_t>(in.batch) * p.s_q * p.h_q * p.d_qk;
  in.q.resize(q_count * dtype_bytes(p.q_dtype));
  const float q_inv_scale = p.q_dtype == DType::kFP8E4M3 ? 1.0f / in.q_scale : 1.0f;
  for (int64_t k = 0; k < q_count; ++k) {
    store(in.q.data(), k, p.q_dtype, rng.normal(kQ, k) * opt.magnitude * q_inv_scale);
  }

  if (p.sparse() && opt.sparse_tails) {
    // Each (request, token) row: min(n, topk) of the request's n positions, chosen by selection
    // sampling (each kept with probability needed / left, so they come in increasing order),
    // as slots through the block table, then -1.
    in.indices.assign(static_cast<size_t>(in.batch) * p.s_q * p.topk, -1);
    for (int i = 0; i < in.batch; ++i) {
      const int64_t n = lens[i];
      for (int t = 0; t < p.s_q; ++t) {
        const int64_t row = static_cast<int64_t>(i) * p.s_q + t;
        int32_t* out = in.indices.data() + row * p.topk;
        int64_t needed = std::min<int64_t>(n, p.topk), kept = 0;
        for (int64_t pos = 0; pos < n && needed > 0; ++pos) {
          const double u = rng.uniform(kIdx, static_cast<uint64_t>(row) * kMaxSeqLen + pos);
          if (u * static_cast<double>(n - pos) < static_cast<double>(needed)) {
            out[kept++] =
                in.block_table[i * in.block_table_stride + pos / p.page_size] * p.page_size +
                static_cast<int32_t>(pos % p.page_size);
            --needed;
          }
        }
      }
      if (opt.topk_lens) in.topk_lens.push_back(static_cast<int32_t>(std::min<int64_t>(n, p.topk)));
    }
  } else if (p.sparse()) {
    // Each (request, token) selects slots of its own request (or anywhere if it has none), some
    // slots left empty (-1).
    in.indices.resize(static_cast<size_t>(in.batch) * p.s_q * p.topk);
    const int64_t cache_tokens = in.num_pages * p.page_size;
    for (int i = 0; i < in.batch; ++i) {
      for (int64_t k = 0; k < static_cast<int64_t>(p.s_q) * p.topk; ++k) {
        const uint64_t id = static_cast<uint64_t>(i) * p.s_q * p.topk + k;
        int32_t v = -1;
        if (rng.uniform(kIdx, 2 * id) >= opt.sparse_empty) {
          if (lens[i] > 0) {
            const int64_t pos = static_cast<int64_t>(rng.uniform(kIdx, 2 * id + 1) * lens[i]);
            v = in.block_table[i * in.block_table_stride + pos / p.page_size] * p.page_size +
                static_cast<int32_t>(pos % p.page_size);
          } else {
            v = static_cast<int32_t>(rng.uniform(kIdx, 2 * id + 1) * cache_tokens);
          }
        }
        in.indices[id] = v;
      }
      if (opt.topk_lens) {
        in.topk_lens.push_back(
            static_cast<int32_t>(rng.uniform(kLens, 1000003 + i) * (p.topk + 1)));
      }
    }
  }
  if (p.has_extra()) make_extra(p, rng, opt, &in);
  if (p.var_q) pack_query_rows(rng, opt, &in);
  return in;
}

}  // namespace mlakit::harness
