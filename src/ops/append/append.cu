// Cache append on the GPU: new tokens (bf16/fp16) quantized into a KV cache layout or into the
// indexer cache at their slots, bit for bit as the cpu reference (append_cpu.cc).
//
// Schedule: one warp per token, four tokens per 128-thread block. A quantization group (128
// values blockwise and indexer, 64 in V4) is held by the warp, kGroup / 32 values a lane; its
// amax is a warp max (exact in any order), the scale comes from ops/quant.h, the values are
// divided (IEEE, round to nearest) and narrowed to e4m3 with saturation. The op moves a few
// kilobytes per token and is bound by launch latency at decode sizes; no tuning was done.
// Graph-capturable: the grid depends on n_tokens only; slots are read on the device and one out
// of range is skipped.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "core/check.h"
#include "core/cuda_check.h"
#include "kernels/common/pdl.h"
#include "ops/append/append.h"
#include "ops/quant.h"

namespace mlakit::ops {
namespace {

constexpr int kWarps = 4;

struct AppendParams {
  const uint16_t* src;  // [n_tokens, ld] bf16 or fp16
  int64_t ld;           // elements between tokens
  bool src_fp16;
  const int64_t* slots;  // [n_tokens], -1 = skip
  uint8_t* cache;        // [num_pages, page_bytes]
  int64_t n_tokens;
  int64_t cache_tokens;  // num_pages * page_size: slots at or past it are skipped
  int64_t page_bytes;
  int32_t page_size;
  KvLayout layout;    // append_kv only
  DType cache_dtype;  // append_kv only
  float k_scale;      // dense e4m3 only, when k_scale_ptr is null
  const float* k_scale_ptr;
  bool power_of_two;  // append_indexer only
};

__device__ __forceinline__ float widen(const AppendParams& p, const uint16_t* row, int d) {
  const uint16_t bits = row[d];
  return p.src_fp16 ? __half2float(__ushort_as_half(bits)) : __uint_as_float(uint32_t{bits} << 16);
}

__device__ __forceinline__ uint8_t to_e4m3(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The group's values, lane l holding values l, l + 32, ...
template <int kGroup>
struct Group {
  float x[kGroup / 32];
};

template <int kGroup>
__device__ __forceinline__ Group<kGroup> load_group(const AppendParams& p, const uint16_t* row,
                                                    int first, int lane) {
  Group<kGroup> g;
#pragma unroll
  for (int j = 0; j < kGroup / 32; ++j) g.x[j] = widen(p, row, first + lane + 32 * j);
  return g;
}

template <int kGroup>
__device__ __forceinline__ float group_amax(const Group<kGroup>& g) {
  float m = 0.0f;
#pragma unroll
  for (int j = 0; j < kGroup / 32; ++j) m = fmaxf(m, fabsf(g.x[j]));
  return warp_max(m);
}

template <int kGroup>
__device__ __forceinline__ void store_group(const Group<kGroup>& g, float scale, uint8_t* dst,
                                            int lane) {
#pragma unroll
  for (int j = 0; j < kGroup / 32; ++j) dst[lane + 32 * j] = to_e4m3(__fdiv_rn(g.x[j], scale));
}

__device__ __forceinline__ void store_rope(const AppendParams& p, const uint16_t* row, int first,
                                           uint8_t* dst, int lane) {
  uint16_t* out = reinterpret_cast<uint16_t*>(dst);
  for (int d = lane; d < kDRope; d += 32) out[d] = bf16_bits(widen(p, row, first + d));
}

__global__ void append_kv_kernel(const __grid_constant__ AppendParams p) {
  pdl::griddepcontrol_wait();  // the rows, the slots or the cache may come from the previous kernel
  const int lane = threadIdx.x % 32;
  const int64_t t = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32;
  if (t >= p.n_tokens) return;
  const int64_t slot = p.slots[t];
  if (slot < 0 || slot >= p.cache_tokens) return;
  const uint16_t* row = p.src + t * p.ld;
  uint8_t* page = p.cache + slot / p.page_size * p.page_bytes;
  const int64_t offset = slot % p.page_size;

  if (p.layout == KvLayout::kFp8Blockwise) {
    uint8_t* dst = page + offset * kBlockwiseBytes;
    for (int g = 0; g < kDv / kBlockwiseGroup; ++g) {
      const Group<kBlockwiseGroup> x =
          load_group<kBlockwiseGroup>(p, row, g * kBlockwiseGroup, lane);
      const float scale = blockwise_scale(group_amax(x));
      store_group(x, scale, dst + g * kBlockwiseGroup, lane);
      if (lane == 0) reinterpret_cast<float*>(dst + kDv)[g] = scale;
    }
    store_rope(p, row, kDv, dst + kDv + (kDv / kBlockwiseGroup) * sizeof(float), lane);
    return;
  }
  if (p.layout == KvLayout::kFp8V4) {
    uint8_t* dst = page + offset * kV4DataBytes;
    uint8_t* scales = page + int64_t{p.page_size} * kV4DataBytes + offset * kV4ScaleBytes;
    for (int g = 0; g < kV4Nope / kV4Group; ++g) {
      const Group<kV4Group> x = load_group<kV4Group>(p, row, g * kV4Group, lane);
      const uint8_t e = v4_exponent(group_amax(x));
      store_group(x, pow2(e - 127), dst + g * kV4Group, lane);
      if (lane == 0) scales[g] = e;
    }
    if (lane == 0) scales[kV4ScaleBytes - 1] = 0xff;
    store_rope(p, row, kV4Nope, dst + kV4Nope, lane);
    return;
  }
  if (p.cache_dtype == DType::kFP8E4M3) {
    const float k_scale = p.k_scale_ptr != nullptr ? *p.k_scale_ptr : p.k_scale;
    uint8_t* dst = page + offset * kDqk;
    for (int d = lane; d < kDqk; d += 32) dst[d] = to_e4m3(__fdiv_rn(widen(p, row, d), k_scale));
    return;
  }
  uint16_t* dst = reinterpret_cast<uint16_t*>(page + offset * kDqk * 2);
  for (int d = lane; d < kDqk; d += 32) {
    const float x = widen(p, row, d);
    dst[d] = p.cache_dtype == DType::kBF16 ? bf16_bits(x) : __half_as_ushort(__float2half_rn(x));
  }
}

__global__ void append_indexer_kernel(const __grid_constant__ AppendParams p) {
  pdl::griddepcontrol_wait();  // as append_kv_kernel's
  const int lane = threadIdx.x % 32;
  const int64_t t = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32;
  if (t >= p.n_tokens) return;
  const int64_t slot = p.slots[t];
  if (slot < 0 || slot >= p.cache_tokens) return;
  uint8_t* page = p.cache + slot / p.page_size * p.page_bytes;
  const int64_t offset = slot % p.page_size;
  const Group<kIndexerDim> x = load_group<kIndexerDim>(p, p.src + t * p.ld, 0, lane);
  const float scale = indexer_scale(group_amax(x), p.power_of_two);
  store_group(x, scale, page + offset * kIndexerDim, lane);
  if (lane == 0) {
    reinterpret_cast<float*>(page + int64_t{p.page_size} * kIndexerDim)[offset] = scale;
  }
}

// enable_pdl: programmatic dependent launch (ops.h) where the device takes it.
Status launch(void (*kernel)(AppendParams), const AppendParams& p, bool enable_pdl, Stream stream,
              const char* name) {
  if (p.n_tokens == 0) return Status::Ok();
  const int64_t blocks = (p.n_tokens + kWarps - 1) / kWarps;
  MLAKIT_CUDA_RETURN(pdl::launch(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kWarps * 32), 0,
                                 static_cast<cudaStream_t>(stream),
                                 enable_pdl && pdl::current_device_takes_pdl(), p));
  MLAKIT_CUDA_RETURN_LAUNCH(name);
  return Status::Ok();
}

}  // namespace

Status append_kv_cuda(const AppendKvArgs& a, int64_t ld, Stream stream) {
  const AppendParams p = {
      .src = static_cast<const uint16_t*>(a.kv),
      .ld = ld,
      .src_fp16 = a.kv_dtype == DType::kFP16,
      .slots = a.slot_mapping,
      .cache = static_cast<uint8_t*>(a.kv_cache),
      .n_tokens = a.n_tokens,
      .cache_tokens = a.num_pages * a.page_size,
      .page_bytes = static_cast<int64_t>(kv_page_bytes(a.cache_dtype, a.cache_layout, a.page_size)),
      .page_size = a.page_size,
      .layout = a.cache_layout,
      .cache_dtype = a.cache_dtype,
      .k_scale = a.k_scale,
      .k_scale_ptr = a.k_scale_ptr,
      .power_of_two = false,
  };
  return launch(append_kv_kernel, p, a.enable_pdl, stream, "append_kv_kernel");
}

Status append_indexer_cuda(const AppendIndexerArgs& a, int64_t ld, Stream stream) {
  const AppendParams p = {
      .src = static_cast<const uint16_t*>(a.k),
      .ld = ld,
      .src_fp16 = a.k_dtype == DType::kFP16,
      .slots = a.slot_mapping,
      .cache = static_cast<uint8_t*>(a.index_cache),
      .n_tokens = a.n_tokens,
      .cache_tokens = a.num_pages * a.page_size,
      .page_bytes = static_cast<int64_t>(indexer_page_bytes(a.page_size)),
      .page_size = a.page_size,
      .layout = KvLayout::kDense,
      .cache_dtype = DType::kFP8E4M3,
      .k_scale = NAN,
      .k_scale_ptr = nullptr,
      .power_of_two = a.scale == IndexerScale::kPowerOfTwo,
  };
  return launch(append_indexer_kernel, p, a.enable_pdl, stream, "append_indexer_kernel");
}

}  // namespace mlakit::ops
