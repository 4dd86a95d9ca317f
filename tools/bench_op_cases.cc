// mlakit bench-op's cases (bench_op.h): a cache append, the indexer's logits or the top-k
// selection on random inputs, checked against the cpu reference (append and top-k bit for bit;
// the indexer within float accumulation error, on its first request) and timed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "bench_op.h"
#include "core/check.h"
#include "core/cuda_check.h"
#include "core/numeric.h"
#include "harness/timing.h"
#include "mlakit/ops.h"
#include "ops/indexer/indexer.h"
#include "ops/topk/topk.h"

namespace mlakit::tools {
namespace {

constexpr float kDenseFp8Scale = 0.05f;

// Device memory for a host vector's bytes, uploaded.
Status upload(const void* host, size_t bytes, harness::DeviceBuffer* dev) {
  *dev = harness::DeviceBuffer(std::max<size_t>(bytes, 16));
  if (dev->get() == nullptr) return Status(StatusCode::kCudaError, "cudaMalloc failed");
  MLAKIT_CUDA_RETURN(cudaMemcpy(dev->get(), host, bytes, cudaMemcpyHostToDevice));
  return Status::Ok();
}

template <typename T>
Status download(const harness::DeviceBuffer& dev, std::vector<T>* host) {
  MLAKIT_CUDA_RETURN(
      cudaMemcpy(host->data(), dev.get(), host->size() * sizeof(T), cudaMemcpyDeviceToHost));
  return Status::Ok();
}

template <typename T>
std::string compare_exact(const std::vector<T>& got, const std::vector<T>& want, bool* ok) {
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &want[i], sizeof(T)) != 0;
  *ok = differ == 0;
  return differ == 0 ? "exact" : str_cat("FAIL ", differ, " differ");
}

// Unless --no-verify: one launch, then `dev` compared bit for bit with `want` (both passed
// through `normalize` first: the identity, or for an unordered top-k each row sorted); then the
// timed replays of `launch`.
template <typename T, typename Launch, typename Normalize = void (*)(std::vector<T>*)>
Status verify_exact_then_time(
    const OpFlags& f, Launch& launch, const harness::DeviceBuffer& dev, std::vector<T> want,
    OpRow* row, Normalize normalize = [](std::vector<T>*) {}) {
  if (!f.no_verify) {
    MLAKIT_RETURN_IF_ERROR(launch(0, nullptr));
    MLAKIT_CUDA_RETURN(cudaStreamSynchronize(nullptr));
    std::vector<T> got(want.size());
    MLAKIT_RETURN_IF_ERROR(download(dev, &got));
    normalize(&got);
    normalize(&want);
    row->check = compare_exact(got, want, &row->ok);
  }
  harness::TimingOptions topt{.warmup = f.warmup, .replays = f.replays, .settle_ms = f.settle_ms};
  return harness::time_gpu_launches(launch, 1, topt, &row->timing);
}

std::vector<uint16_t> random_bf16(std::mt19937_64& gen, size_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = float_to_bf16(normal(gen) * 2.0f);
  return v;
}

// Pages of each request shuffled over the cache: [batch, pages_per] page ids.
std::vector<int32_t> shuffled_table(std::mt19937_64& gen, int64_t batch, int64_t pages_per) {
  std::vector<int32_t> table(batch * pages_per);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  std::shuffle(table.begin(), table.end(), gen);
  return table;
}

// Fills `logits` (whole rows of `len`) with the rows of a file of float32 rows of `len` values,
// cycling through them; reads no more of the file than `logits` takes.
Status read_logit_rows(const std::string& path, int64_t len, std::vector<float>* logits) {
  std::error_code error;
  const bool regular = std::filesystem::is_regular_file(path, error);
  const uintmax_t bytes = regular ? std::filesystem::file_size(path, error) : 0;
  if (!regular || error) return invalid_argument("--logits-file", "a readable file", path);
  const uintmax_t row_bytes = static_cast<uintmax_t>(len) * sizeof(float);
  if (bytes == 0 || bytes % row_bytes != 0) {
    return invalid_argument("--logits-file",
                            str_cat("whole rows of --len ", len, " float32 values"),
                            str_cat(path, " (", bytes, " bytes)"));
  }
  const size_t values = static_cast<size_t>(
      std::min<uintmax_t>(bytes / sizeof(float), static_cast<uintmax_t>(logits->size())));
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return invalid_argument("--logits-file", "a readable file", path);
  const size_t got = std::fread(logits->data(), sizeof(float), values, file);
  std::fclose(file);
  if (got != values) {
    return invalid_argument("--logits-file", str_cat(values, " float32 values read"),
                            str_cat(path, " (", got, " read)"));
  }
  for (size_t i = values; i < logits->size(); ++i) (*logits)[i] = (*logits)[i % values];
  return Status::Ok();
}

}  // namespace

// Appends next_n new tokens per request at positions len..len+next_n-1: the cache holds each
// request's pages for those positions only (the earlier pages are never touched).
Status bench_append(const OpFlags& f, const AppendKind& kind, bool gpu, OpRow* row) {
  const OpCase& c = row->c;
  const int ps = f.page_size;
  const int64_t n = int64_t{c.batch} * c.next_n;
  const int64_t first_page = c.len / ps, last_page = (int64_t{c.len} + c.next_n - 1) / ps;
  const int64_t pages_per = last_page - first_page + 1;
  const int64_t num_pages = c.batch * pages_per;
  const size_t page_bytes =
      kind.indexer ? ops::indexer_page_bytes(ps) : kv_page_bytes(kind.dtype, kind.layout, ps);
  std::mt19937_64 gen(f.seed);
  const std::vector<uint16_t> kv = random_bf16(gen, n * kind.d);
  const std::vector<int32_t> table = shuffled_table(gen, c.batch, pages_per);
  std::vector<int64_t> slots(n);
  for (int64_t i = 0; i < c.batch; ++i) {
    for (int t = 0; t < c.next_n; ++t) {
      const int64_t pos = int64_t{c.len} + t;
      slots[i * c.next_n + t] =
          int64_t{table[i * pages_per + pos / ps - first_page]} * ps + pos % ps;
    }
  }
  const size_t token_bytes = kind.indexer                      ? ops::kIndexerDim + sizeof(float)
                             : kind.layout == KvLayout::kDense ? kDqk * dtype_bytes(kind.dtype)
                             : kind.layout == KvLayout::kFp8Blockwise ? kBlockwiseBytes
                                                                      : kV4TokenBytes;
  row->bytes = static_cast<double>(n) * (kind.d * 2 + token_bytes + sizeof(int64_t));

  auto run = [&](ops::Device device, const void* x, const int64_t* s, void* cache, Stream st) {
    if (kind.indexer) {
      return ops::append_indexer(device,
                                 {.n_tokens = n,
                                  .k = x,
                                  .slot_mapping = s,
                                  .index_cache = cache,
                                  .num_pages = num_pages,
                                  .page_size = ps,
                                  .enable_pdl = f.pdl},
                                 st);
    }
    const bool scaled = kind.layout == KvLayout::kDense && kind.dtype == DType::kFP8E4M3;
    return ops::append_kv(device,
                          {.n_tokens = n,
                           .kv = x,
                           .slot_mapping = s,
                           .kv_cache = cache,
                           .num_pages = num_pages,
                           .page_size = ps,
                           .cache_dtype = kind.dtype,
                           .cache_layout = kind.layout,
                           .k_scale = scaled ? kDenseFp8Scale : NAN,
                           .enable_pdl = f.pdl},
                          st);
  };
  std::vector<uint8_t> want(num_pages * page_bytes, 0x5a);
  MLAKIT_RETURN_IF_ERROR(run(ops::Device::kCpu, kv.data(), slots.data(), want.data(), nullptr));
  if (!gpu) {
    row->check = "reference";
    std::vector<uint8_t> cache = want;
    return harness::time_cpu_calls(
        [&] { return run(ops::Device::kCpu, kv.data(), slots.data(), cache.data(), nullptr); },
        std::min(f.replays, 3), &row->timing);
  }
  harness::DeviceBuffer dkv, dslots, dcache;
  const std::vector<uint8_t> poison(want.size(), 0x5a);
  MLAKIT_RETURN_IF_ERROR(upload(kv.data(), kv.size() * sizeof(uint16_t), &dkv));
  MLAKIT_RETURN_IF_ERROR(upload(slots.data(), slots.size() * sizeof(int64_t), &dslots));
  MLAKIT_RETURN_IF_ERROR(upload(poison.data(), poison.size(), &dcache));
  auto launch = [&](int, Stream st) {
    return run(ops::Device::kCuda, dkv.get(), dslots.as<int64_t>(), dcache.get(), st);
  };
  return verify_exact_then_time(f, launch, dcache, want, row);
}

Status bench_topk(const OpFlags& f, bool gpu, OpRow* row) {
  const OpCase& c = row->c;
  const int ps = f.page_size;
  const int64_t rows = int64_t{c.batch} * c.next_n;
  const int64_t pages_per = std::max<int64_t>(1, (int64_t{c.len} + ps - 1) / ps);
  std::mt19937_64 gen(f.seed);
  std::vector<float> logits(rows * std::max(c.len, 1));
  if (f.logits_file.empty()) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& x : logits) x = normal(gen);
  } else {
    MLAKIT_RETURN_IF_ERROR(read_logit_rows(f.logits_file, std::max(c.len, 1), &logits));
  }
  const std::vector<int32_t> lens(c.batch, c.len);
  const std::vector<int32_t> table = shuffled_table(gen, c.batch, pages_per);
  row->bytes = static_cast<double>(rows) * (int64_t{c.len} + f.k) * sizeof(float);

  const ops::TopkArgs shape = {.batch = c.batch, .next_n = c.next_n, .k = f.k, .max_len = c.len};
  // The kernel: --kernel auto lets the op choose (topk_choose); the others run that kernel by
  // itself. The workspace is allocated for auto and multi-block.
  std::string kernel = f.kernel;
  if (gpu && kernel == "auto") {
    ops::TopkKernel chosen;
    ops::TopkClusterPlan plan;
    MLAKIT_RETURN_IF_ERROR(
        ops::topk_choose_here(shape, ops::topk_workspace_bytes(shape) > 0, &chosen, &plan));
    kernel = ops::topk_kernel_name(chosen);
  }
  const bool with_workspace = f.kernel == "auto" || f.kernel == "multi-block";
  const size_t ws_bytes = gpu && with_workspace ? ops::topk_workspace_bytes(shape) : 0;
  if (gpu && f.kernel == "multi-block" && ws_bytes == 0) {
    return invalid_argument("--kernel", "a shape the multi-block kernel takes (--len >= 8192, > k)",
                            "multi-block");
  }
  harness::DeviceBuffer dws;
  if (ws_bytes > 0) {
    dws = harness::DeviceBuffer(ws_bytes);
    if (dws.get() == nullptr) return Status(StatusCode::kCudaError, "cudaMalloc failed");
  }
  auto run = [&](ops::Device device, const float* l, const int32_t* n, const int32_t* t,
                 int32_t* out, Stream st) {
    const bool cuda = device == ops::Device::kCuda;
    const ops::TopkArgs a = {.batch = c.batch,
                             .next_n = c.next_n,
                             .k = f.k,
                             .logits = l,
                             .max_len = c.len,
                             .logits_stride = std::max(c.len, 1),
                             .seq_lens = n,
                             .block_table = t,
                             .block_table_stride = pages_per,
                             .page_size = ps,
                             .indices = out,
                             .workspace = cuda ? dws.get() : nullptr,
                             .workspace_size = cuda ? ws_bytes : 0,
                             .deterministic = !f.nondeterministic,
                             .enable_pdl = f.pdl};
    // The kernels by themselves skip the op's checks: the cpu run checked the same arguments.
    if (!cuda || f.kernel == "auto") return ops::topk_indices(device, a, st);
    const int64_t ld = a.logits_stride;
    if (f.kernel == "cluster") return ops::topk_indices_cluster(a, ld, st);
    if (f.kernel == "stream") return ops::topk_indices_stream(a, ld, st);
    if (f.kernel == "multi-block") return ops::topk_indices_multi(a, ld, st);
    return ops::topk_indices_one_block(a, ld, st);
  };
  std::vector<int32_t> want(rows * f.k);
  MLAKIT_RETURN_IF_ERROR(
      run(ops::Device::kCpu, logits.data(), lens.data(), table.data(), want.data(), nullptr));
  if (!gpu) {
    row->check = "reference";
    std::vector<int32_t> out(want.size());
    return harness::time_cpu_calls(
        [&] {
          return run(ops::Device::kCpu, logits.data(), lens.data(), table.data(), out.data(),
                     nullptr);
        },
        std::min(f.replays, 3), &row->timing);
  }
  harness::DeviceBuffer dlogits, dlens, dtable, dout;
  const std::vector<int32_t> poison(want.size(), -7);
  MLAKIT_RETURN_IF_ERROR(upload(logits.data(), logits.size() * sizeof(float), &dlogits));
  MLAKIT_RETURN_IF_ERROR(upload(lens.data(), lens.size() * sizeof(int32_t), &dlens));
  MLAKIT_RETURN_IF_ERROR(upload(table.data(), table.size() * sizeof(int32_t), &dtable));
  MLAKIT_RETURN_IF_ERROR(upload(poison.data(), poison.size() * sizeof(int32_t), &dout));
  auto launch = [&](int, Stream st) {
    return run(ops::Device::kCuda, dlogits.as<float>(), dlens.as<int32_t>(), dtable.as<int32_t>(),
               dout.as<int32_t>(), st);
  };
  row->kernel = kernel;
  // --nondeterministic: the kept slots in any order, so each row is compared sorted (normal
  // random logits have no ties: the same set as the reference's).
  return verify_exact_then_time(f, launch, dout, want, row, [&](std::vector<int32_t>* v) {
    if (!f.nondeterministic) return;
    for (int64_t r = 0; r < rows; ++r) std::sort(v->begin() + r * f.k, v->begin() + (r + 1) * f.k);
  });
}

alignas(16) constexpr uint8_t kAligned16[16] = {};

// The indexer over random e4m3 keys (no NaN codes) and scales, or (--keys normal) normal keys
// quantized by the cpu append, in shuffled pages; q, weights random.
// Checked on request 0 against the cpu reference (a batch of one over the same pages); every
// other request's logits for not being left unwritten (NaN-poisoned before the run).
Status bench_indexer(const OpFlags& f, bool gpu, OpRow* row) {
  const OpCase& c = row->c;
  const int ps = f.page_size;
  const int64_t rows = int64_t{c.batch} * c.next_n;
  const int64_t pages_per = std::max<int64_t>(1, (int64_t{c.len} + ps - 1) / ps);
  const int64_t len = std::max(c.len, 1);
  std::mt19937_64 gen(f.seed);
  const int64_t page_bytes = static_cast<int64_t>(ops::indexer_page_bytes(ps));
  std::vector<uint8_t> cache(c.batch * pages_per * page_bytes);
  if (f.keys == "normal") {
    // Normal bf16 keys quantized by the cpu append (per-token amax scales) into a pool of up to
    // 1024 pages, repeated over the cache (the kernels' speed does not depend on which page
    // repeats; generating every key would take minutes at 128 x 128K).
    const int64_t pool_pages = std::min<int64_t>(c.batch * pages_per, 1024);
    const std::vector<uint16_t> k = random_bf16(gen, pool_pages * ps * ops::kIndexerDim);
    std::vector<int64_t> slots(pool_pages * ps);
    for (size_t t = 0; t < slots.size(); ++t) slots[t] = static_cast<int64_t>(t);
    ops::AppendIndexerArgs ap;
    ap.n_tokens = pool_pages * ps;
    ap.k = k.data();
    ap.slot_mapping = slots.data();
    ap.index_cache = cache.data();
    ap.num_pages = pool_pages;
    ap.page_size = ps;
    MLAKIT_RETURN_IF_ERROR(ops::append_indexer(ops::Device::kCpu, ap));
    for (int64_t pg = pool_pages; pg < c.batch * pages_per; ++pg) {
      std::memcpy(cache.data() + pg * page_bytes, cache.data() + (pg % pool_pages) * page_bytes,
                  page_bytes);
    }
  } else {
    for (int64_t pg = 0; pg < c.batch * pages_per; ++pg) {
      uint8_t* page = cache.data() + pg * page_bytes;
      for (int64_t e = 0; e < int64_t{ps} * ops::kIndexerDim; e += 8) {
        uint64_t bits = gen();
        for (int b = 0; b < 8; ++b, bits >>= 8) {
          const auto v = static_cast<uint8_t>(bits);
          page[e + b] = (v & 0x7f) == 0x7f ? v ^ 1 : v;  // 0x7f / 0xff are NaN
        }
      }
      auto* scales = reinterpret_cast<float*>(page + int64_t{ps} * ops::kIndexerDim);
      for (int t = 0; t < ps; ++t) scales[t] = static_cast<float>(gen() % 1000 + 1) / 448e3f;
    }
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> q(rows * f.heads * ops::kIndexerDim);
  for (uint8_t& v : q) v = float_to_e4m3(normal(gen) * 0.5f);
  std::vector<float> weights(rows * f.heads);
  for (float& w : weights) w = normal(gen);
  const std::vector<int32_t> lens(c.batch, c.len);
  const std::vector<int32_t> table = shuffled_table(gen, c.batch, pages_per);
  row->bytes = static_cast<double>(c.batch) * c.len * (ops::kIndexerDim + 4) +
               static_cast<double>(q.size() + weights.size() * 4) +
               static_cast<double>(rows) * c.len * 4;
  // The kernel: --kernel auto lets the op choose (indexer.h: on sm_90 the persistent or the
  // pipelined kernel for the page sizes they take, else the copy kernel); the others run that
  // kernel by itself.
  auto run = [&](ops::Device device, int batch, const uint8_t* qp, const float* wp, const void* cp,
                 const int32_t* tp, const int32_t* np, float* out, Stream st) {
    const ops::IndexerLogitsArgs a = {.batch = batch,
                                      .next_n = c.next_n,
                                      .heads = f.heads,
                                      .q = qp,
                                      .weights = wp,
                                      .index_cache = cp,
                                      .num_pages = c.batch * pages_per,
                                      .page_size = ps,
                                      .block_table = tp,
                                      .block_table_stride = pages_per,
                                      .seq_lens = np,
                                      .logits = out,
                                      .max_len = len,
                                      .enable_pdl = f.pdl};
    // The kernels by themselves skip the op's checks: the cpu run checked the same arguments.
    if (device == ops::Device::kCpu || f.kernel == "auto")
      return ops::indexer_logits(device, a, st);
    return ops::indexer_logits_cuda(a, len, st,
                                    f.kernel == "tma"          ? ops::IndexerKernel::kTma
                                    : f.kernel == "tma-wide"   ? ops::IndexerKernel::kTmaWide
                                    : f.kernel == "persistent" ? ops::IndexerKernel::kPersistent
                                                               : ops::IndexerKernel::kCopy);
  };
  const DeviceInfo dev = gpu ? current_device() : DeviceInfo{};
  if (gpu) {  // auto: the op's rule (indexer.h) on this device and these shapes
    // Any 16-byte aligned address stands for the cache (cudaMalloc's are).
    const ops::IndexerLogitsArgs shape = {.batch = c.batch,
                                          .next_n = c.next_n,
                                          .heads = f.heads,
                                          .index_cache = &kAligned16,
                                          .page_size = ps,
                                          .max_len = len};
    const ops::IndexerKernel k = ops::indexer_auto_kernel(shape, dev.sm_major, dev.sm_count);
    row->kernel = f.kernel != "auto"                     ? f.kernel
                  : k == ops::IndexerKernel::kTma        ? "tma"
                  : k == ops::IndexerKernel::kTmaWide    ? "tma-wide"
                  : k == ops::IndexerKernel::kPersistent ? "persistent"
                                                         : "copy";
  }
  std::vector<float> want(int64_t{c.next_n} * len);  // request 0
  MLAKIT_RETURN_IF_ERROR(run(ops::Device::kCpu, 1, q.data(), weights.data(), cache.data(),
                             table.data(), lens.data(), want.data(), nullptr));
  if (!gpu) {
    row->check = "reference";
    std::vector<float> out(rows * len);
    return harness::time_cpu_calls(
        [&] {
          return run(ops::Device::kCpu, c.batch, q.data(), weights.data(), cache.data(),
                     table.data(), lens.data(), out.data(), nullptr);
        },
        std::min(f.replays, 3), &row->timing);
  }
  harness::DeviceBuffer dq, dw, dtable, dlens, dout;
  MLAKIT_RETURN_IF_ERROR(upload(q.data(), q.size(), &dq));
  MLAKIT_RETURN_IF_ERROR(upload(weights.data(), weights.size() * sizeof(float), &dw));
  // Copies of the cache, rotated by the timed launches so that no call reads its keys from L2
  // (harness::cold_copies: at least 3x the L2 between two uses of a copy), as a server's decode
  // step, with the rest of the layer in between, would; 1 x 8K alone is 1 MB.
  const int copies = harness::cold_copies(cache.size(), dev.l2_bytes, dev.global_mem_bytes / 3);
  std::vector<harness::DeviceBuffer> dcache(copies);
  for (harness::DeviceBuffer& d : dcache)
    MLAKIT_RETURN_IF_ERROR(upload(cache.data(), cache.size(), &d));
  MLAKIT_RETURN_IF_ERROR(upload(table.data(), table.size() * sizeof(int32_t), &dtable));
  MLAKIT_RETURN_IF_ERROR(upload(lens.data(), lens.size() * sizeof(int32_t), &dlens));
  const std::vector<float> poison(rows * len, NAN);
  MLAKIT_RETURN_IF_ERROR(upload(poison.data(), poison.size() * sizeof(float), &dout));
  auto launch = [&](int k, Stream st) {
    return run(ops::Device::kCuda, c.batch, dq.as<uint8_t>(), dw.as<float>(), dcache[k].get(),
               dtable.as<int32_t>(), dlens.as<int32_t>(), dout.as<float>(), st);
  };
  if (!f.no_verify) {
    MLAKIT_RETURN_IF_ERROR(launch(0, nullptr));
    MLAKIT_CUDA_RETURN(cudaStreamSynchronize(nullptr));
    std::vector<float> got(poison.size());
    MLAKIT_RETURN_IF_ERROR(download(dout, &got));
    size_t differ = 0;
    float worst = 0;  // largest |got - want| / the row's largest |logit|
    for (int64_t r = 0; r < c.next_n; ++r) {
      float row_max = 0;
      for (int64_t j = 0; j < len; ++j) {
        if (std::isfinite(want[r * len + j]))
          row_max = std::max(row_max, std::abs(want[r * len + j]));
      }
      for (int64_t j = 0; j < len; ++j) {
        const float g = got[r * len + j], w = want[r * len + j];
        // fp8 tensor cores accumulate with less than fp32's precision (tests/gpu/ops_test.cc).
        differ += std::isfinite(w) ? !(std::abs(g - w) <= 2e-3f * row_max + 1e-6f) : g != w;
        if (std::isfinite(w) && row_max > 0) worst = std::max(worst, std::abs(g - w) / row_max);
      }
    }
    // Every other request: its logits were poisoned with NaN, which no output is.
    size_t unwritten = 0;
    for (size_t e = static_cast<size_t>(c.next_n) * len; e < got.size(); ++e) {
      unwritten += std::isnan(got[e]) ? 1 : 0;
    }
    differ += unwritten;
    row->ok = differ == 0;
    char err[32];
    std::snprintf(err, sizeof(err), "%.1e", worst);
    row->check = differ == 0 ? str_cat("ok ", err) : str_cat("FAIL ", differ, " differ");
  }
  harness::TimingOptions topt{.warmup = f.warmup, .replays = f.replays, .settle_ms = f.settle_ms};
  return harness::time_gpu_launches(launch, copies, topt, &row->timing);
}

}  // namespace mlakit::tools
