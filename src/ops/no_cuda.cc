// The CUDA launchers of the ops in a build without CUDA: never reached (ops.cc refuses
// Device::kCuda first), defined so that the library links.
#include "core/check.h"
#include "ops/append/append.h"
#include "ops/indexer/indexer.h"
#include "ops/merge/merge.h"
#include "ops/topk/topk.h"

namespace mlakit::ops {
namespace {

Status no_cuda(std::string_view op) {
  return unsupported(op, " on device cuda: mlakit was built without CUDA");
}

}  // namespace

Status append_kv_cuda(const AppendKvArgs&, int64_t, Stream) { return no_cuda("append_kv"); }
Status append_indexer_cuda(const AppendIndexerArgs&, int64_t, Stream) {
  return no_cuda("append_indexer");
}
Status indexer_logits_cuda(const IndexerLogitsArgs&, int64_t, Stream, IndexerKernel) {
  return no_cuda("indexer_logits");
}
bool indexer_tma_takes_page_size(int32_t) { return false; }
IndexerKernel indexer_auto_kernel(const IndexerLogitsArgs&, int, int) {
  return IndexerKernel::kCopy;
}
Status topk_indices_cuda(const TopkArgs&, int64_t, Stream) { return no_cuda("topk_indices"); }
Status topk_indices_one_block(const TopkArgs&, int64_t, Stream) { return no_cuda("topk_indices"); }
Status topk_indices_multi(const TopkArgs&, int64_t, Stream) { return no_cuda("topk_indices"); }
Status topk_indices_cluster(const TopkArgs&, int64_t, Stream) { return no_cuda("topk_indices"); }
Status topk_launch_cluster(const TopkArgs&, int64_t, const TopkClusterPlan&, Stream) {
  return no_cuda("topk_indices");
}
Status topk_indices_stream(const TopkArgs&, int64_t, Stream) { return no_cuda("topk_indices"); }
Status topk_launch_stream(const TopkArgs&, int64_t, const TopkClusterPlan&, Stream) {
  return no_cuda("topk_indices");
}
Status topk_choose_here(const TopkArgs&, bool, TopkKernel* kernel, TopkClusterPlan* plan) {
  *kernel = TopkKernel::kOneBlock;
  *plan = {};
  return Status::Ok();
}
Status topk_stream_plan_here(const TopkArgs&, TopkClusterPlan* plan) {
  *plan = {};  // no device: no streaming kernel
  return Status::Ok();
}
Status topk_cluster_plan_here(const TopkArgs&, TopkClusterPlan* plan) {
  *plan = {};  // no device: no cluster kernel
  return Status::Ok();
}
void topk_forget_occupancy() {}
void topk_cluster_forget_capacity() {}
bool topk_stream_wave_known(int) { return false; }

}  // namespace mlakit::ops

namespace mlakit::cp {

Status merge_partials_cuda(const MergeArgs&, Stream) {
  return unsupported("merge_partials on device cuda: mlakit was built without CUDA");
}

}  // namespace mlakit::cp
