// Workloads on the device (harness/workload.h): device buffers, and the host inputs copied to
// them, with the output poisoned and copied back.
#include <cuda_runtime_api.h>

#include <vector>

#include "core/cuda_check.h"
#include "harness/workload.h"

namespace mlakit::harness {

DeviceBuffer::DeviceBuffer(size_t bytes) : size_(bytes) {
  if (bytes > 0 && cudaMalloc(&ptr_, bytes) != cudaSuccess) {
    ptr_ = nullptr;
    size_ = 0;
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(other.ptr_), size_(other.size_) {
  other.ptr_ = nullptr;
  other.size_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = other.ptr_;
    size_ = other.size_;
    other.ptr_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

namespace {

template <typename T>
Status upload_vector(const std::vector<T>& host, DeviceBuffer* buffer) {
  if (host.empty()) return Status::Ok();
  *buffer = DeviceBuffer(host.size() * sizeof(T));
  if (buffer->get() == nullptr) {
    return Status(StatusCode::kCudaError,
                  str_cat("cudaMalloc of ", host.size() * sizeof(T), " bytes failed"));
  }
  MLAKIT_CUDA_RETURN(
      cudaMemcpy(buffer->get(), host.data(), buffer->size(), cudaMemcpyHostToDevice));
  return Status::Ok();
}

}  // namespace

Status DeviceInputs::upload(const HostInputs& h, DeviceInputs* d) {
  MLAKIT_RETURN_IF_ERROR(upload_vector(h.q, &d->q));
  MLAKIT_RETURN_IF_ERROR(upload_vector(h.kv, &d->kv));
  MLAKIT_RETURN_IF_ERROR(upload_vector(h.block_table, &d->block_table));
  MLAKIT_RETURN_IF_ERROR(upload_vector(h.seq_lens, &d->seq_lens));
  MLAKIT_RETURN_IF_ERROR(upload_vector(h.cu_seqlens_q, &d->cu_seqlens_q));
  MLAKIT_RETURN_IF_ERROR(upload_vector(h.indices, &d->indices));
  MLAKIT_RETURN_IF_ERROR(upload_vector(h.topk_lens, &d->topk_lens));
  MLAKIT_RETURN_IF_ERROR(upload_vector(h.sinks, &d->sinks));
  MLAKIT_RETURN_IF_ERROR(upload_vector(h.extra_kv, &d->extra_kv));
  MLAKIT_RETURN_IF_ERROR(upload_vector(h.extra_indices, &d->extra_indices));
  MLAKIT_RETURN_IF_ERROR(upload_vector(h.extra_topk_lens, &d->extra_topk_lens));
  d->out = DeviceBuffer(h.out_bytes());
  d->lse = DeviceBuffer(h.lse_count() * sizeof(float));
  if (d->out.get() == nullptr || d->lse.get() == nullptr) {
    return Status(StatusCode::kCudaError, "cudaMalloc of the output failed");
  }
  d->args = h.args(d->out.get(), d->lse.as<float>());
  d->args.q = d->q.get();
  d->args.kv_cache = d->kv.get();
  if (!h.problem.sparse()) {
    d->args.block_table = d->block_table.as<int32_t>();
    d->args.seq_lens = d->seq_lens.as<int32_t>();
  } else {
    d->args.indices = d->indices.as<int32_t>();
    d->args.topk_lens = h.topk_lens.empty() ? nullptr : d->topk_lens.as<int32_t>();
  }
  d->args.sinks = h.sinks.empty() ? nullptr : d->sinks.as<float>();
  d->args.cu_seqlens_q = h.problem.var_q ? d->cu_seqlens_q.as<int32_t>() : nullptr;
  if (h.problem.has_extra()) {
    d->args.extra_kv_cache = d->extra_kv.get();
    d->args.extra_indices = d->extra_indices.as<int32_t>();
    d->args.extra_topk_lens =
        h.extra_topk_lens.empty() ? nullptr : d->extra_topk_lens.as<int32_t>();
  }
  return Status::Ok();
}

Status DeviceInputs::download(const HostInputs& h, void* out_host, float* lse_host) const {
  MLAKIT_CUDA_RETURN(cudaMemcpy(out_host, out.get(), h.out_bytes(), cudaMemcpyDeviceToHost));
  if (lse_host != nullptr) {
    MLAKIT_CUDA_RETURN(
        cudaMemcpy(lse_host, lse.get(), h.lse_count() * sizeof(float), cudaMemcpyDeviceToHost));
  }
  return Status::Ok();
}

Status DeviceInputs::poison(const HostInputs& h) const {
  // 0xff bytes are NaN in bf16, fp16 and fp32 alike.
  MLAKIT_CUDA_RETURN(cudaMemset(out.get(), 0xff, h.out_bytes()));
  MLAKIT_CUDA_RETURN(cudaMemset(lse.get(), 0xff, h.lse_count() * sizeof(float)));
  return Status::Ok();
}

}  // namespace mlakit::harness
