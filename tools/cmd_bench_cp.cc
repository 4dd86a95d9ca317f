// mlakit bench --cp N: the context-parallel decode step over GPUs 0..N-1 of this machine
// (docs/context-parallel.md). One process drives them: one NCCL communicator per GPU
// (ncclCommInitAll), one stream per GPU, one host thread per GPU for the calls that may wait on
// the other ranks (harness::for_each_rank, time_gpu_ranks).
//
// Per case: the global workload of the bench's flags, sharded per rank (harness::shard_inputs),
// one Decoder per rank with its cp fields, each rank's decode then the NCCL merge
// (mlakit/cp_nccl.h); the merged result checked against the cpu reference of the unsharded
// problem (every rank's: allgather results must be bitwise equal, heads results are put together);
// timed with graph replays over cold input copies: the unsharded decode on GPU 0, each rank's
// decode alone, the merge with its communication alone, the whole step. The target for
// the step: the unsharded time / N + 15 us. A rank whose decode runs on the cpu backend (no GPU
// backend takes cp_world > 1) gets its partial computed on the host and uploaded: then only the
// merge is timed. An error from a case's first merge on aborts the communicators and ends the
// bench (bench_case).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "bench.h"
#include "bench_cp_rank.h"
#include "bench_cp_row.h"
#include "cli_common.h"
#include "core/check.h"
#include "core/cuda_check.h"
#include "core/host_memory.h"
#include "harness/timing.h"
#include "mlakit/cp.h"
#include "mlakit/cp_nccl.h"

namespace mlakit::tools {
namespace {

using harness::RankGroup;

// A non-blocking stream of the current device, destroyed with it.
struct StreamOf {
  cudaStream_t stream = nullptr;
  Status create() {
    MLAKIT_CUDA_RETURN(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return Status::Ok();
  }
  ~StreamOf() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

// The global problem's rows of one rank's merged result (out [b, s_q, heads, 512]).
int merged_heads(const CpCase& cc, int world) {
  return cc.merge == CpMerge::kHeads ? cc.c.problem.h_q / world : cc.c.problem.h_q;
}

// Why no GPU backend runs a rank's problem (when auto chose the cpu backend).
std::string gpu_refusals(const Problem& p) {
  std::string why;
  for (const BackendInfo& b : list_backends()) {
    if (!b.device_memory || !b.available) continue;
    const Status st = can_run(b.name, p);
    if (!st.ok()) why += str_cat(why.empty() ? "" : "; ", b.name, ": ", st.message());
  }
  return why;
}

// Sets up rank r of the case on GPU r: the shard, the decoder, the device copies, the buffers.
// With a decoder on host memory, the partial is computed here and uploaded.
Status setup_rank(const BenchFlags& f, const CpCase& cc, const harness::HostInputs& global,
                  int world, int r, CpRank* rank) {
  MLAKIT_CUDA_RETURN(cudaSetDevice(r));
  const DeviceInfo device = current_device();
  harness::WorkloadOptions wopt;
  wopt.seed = f.sweep.seed;
  rank->in = harness::shard_inputs(global, world, r, cc.interleave, wopt);
  rank->cache_bytes = rank->in.kv.size();
  std::string name;
  int tactic = f.tactic;
  MLAKIT_RETURN_IF_ERROR(parse_backend(f.backend, &name, &tactic));
  MLAKIT_RETURN_IF_ERROR(Decoder::create(
      rank->in.problem, {.backend = name, .tactic = tactic, .tune_cache_path = f.tune_cache},
      &rank->decoder));
  const Problem& p = rank->in.problem;
  if (rank->decoder->device_memory()) {
    MLAKIT_RETURN_IF_ERROR(harness::upload_cold_copies(rank->in, device.l2_bytes,
                                                       device.global_mem_bytes / 3, &rank->copies));
    rank->workspace_bytes = rank->decoder->workspace_bytes();
    MLAKIT_RETURN_IF_ERROR(alloc(rank->workspace_bytes, &rank->workspace, "decode workspace"));
  } else {
    // The partial from the host decoder, uploaded as the one copy's out / lse.
    std::vector<uint8_t> out(rank->in.out_bytes());
    std::vector<float> lse(rank->in.lse_count());
    MLAKIT_RETURN_IF_ERROR(
        rank->decoder->run(rank->in.args(out.data(), lse.data()), nullptr, 0, nullptr));
    rank->copies.resize(1);
    harness::DeviceInputs& d = rank->copies[0];
    MLAKIT_RETURN_IF_ERROR(alloc(out.size(), &d.out, "partial out"));
    MLAKIT_RETURN_IF_ERROR(alloc(lse.size() * sizeof(float), &d.lse, "partial lse"));
    MLAKIT_CUDA_RETURN(cudaMemcpy(d.out.get(), out.data(), out.size(), cudaMemcpyHostToDevice));
    MLAKIT_CUDA_RETURN(
        cudaMemcpy(d.lse.get(), lse.data(), lse.size() * sizeof(float), cudaMemcpyHostToDevice));
    d.args.out = d.out.get();
    d.args.lse = d.lse.as<float>();
  }
  std::vector<uint8_t>().swap(rank->in.kv);  // uploaded: the host copy is no longer needed
  if (global.problem.has_sinks) {
    MLAKIT_RETURN_IF_ERROR(alloc(global.sinks.size() * sizeof(float), &rank->sinks, "sinks"));
    MLAKIT_CUDA_RETURN(cudaMemcpy(rank->sinks.get(), global.sinks.data(),
                                  global.sinks.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  const int heads = merged_heads(cc, world);
  const size_t rows = size_t(cc.c.batch) * p.s_q * heads;
  MLAKIT_RETURN_IF_ERROR(alloc(rows * kDv * dtype_bytes(p.out_dtype), &rank->out, "merged out"));
  MLAKIT_RETURN_IF_ERROR(alloc(rows * sizeof(float), &rank->lse, "merged lse"));
  MLAKIT_RETURN_IF_ERROR(nccl_merge_workspace_bytes(cc.merge, world, merge_args(cc, *rank, 0, true),
                                                    &rank->merge_workspace_bytes));
  return alloc_merge_workspace(cc.exchange, rank);
}

// Each rank's decode into its first copy (poisoned partial), on every rank at once. No collective:
// a rank that fails leaves the communicators as they were. Poisoning (cudaMemset, on the legacy
// stream) is waited for before the rank's own stream runs.
Status decode_partials(std::vector<CpRank>& ranks) {
  std::vector<int> devices(ranks.size());
  std::iota(devices.begin(), devices.end(), 0);
  return harness::for_each_rank(devices, [&](int r, const RankGroup&) -> Status {
    CpRank& rank = ranks[r];
    MLAKIT_RETURN_IF_ERROR(rank.copies[0].poison(rank.in));
    // In place: the whole merge workspace, the rank's slot that the decode writes included.
    if (rank.copies[0].args.out != rank.copies[0].out.get()) {
      MLAKIT_CUDA_RETURN(cudaMemset(rank.merge_ws(), 0xff, rank.merge_workspace_bytes));
    }
    MLAKIT_CUDA_RETURN(cudaDeviceSynchronize());
    StreamOf stream;
    MLAKIT_RETURN_IF_ERROR(stream.create());
    MLAKIT_RETURN_IF_ERROR(rank.decoder->run(rank.copies[0].args, rank.workspace.get(),
                                             rank.workspace_bytes, stream.stream));
    MLAKIT_CUDA_RETURN(cudaStreamSynchronize(stream.stream));
    return Status::Ok();
  });
}

// The merges of the first copies' partials (poisoned results) on every rank at once, then the
// merged results compared with the reference.
Status verify(const BenchFlags& f, const CpCase& cc, const harness::HostInputs& global,
              std::vector<CpRank>& ranks, CpComms& comms, CpRow* row) {
  const int world = static_cast<int>(ranks.size());
  std::vector<int> devices(world);
  std::iota(devices.begin(), devices.end(), 0);
  const bool lse = f.sweep.lse;
  MLAKIT_RETURN_IF_ERROR(
      harness::for_each_rank(devices, [&](int r, const RankGroup& group) -> Status {
        CpRank& rank = ranks[r];
        MLAKIT_CUDA_RETURN(cudaMemset(rank.out.get(), 0xff, rank.out.size()));  // NaN
        MLAKIT_CUDA_RETURN(cudaMemset(rank.lse.get(), 0xff, rank.lse.size()));
        MLAKIT_CUDA_RETURN(cudaDeviceSynchronize());
        StreamOf stream;
        MLAKIT_RETURN_IF_ERROR(stream.create());
        MLAKIT_RETURN_IF_ERROR(merge_nccl(cc.merge, comms.comms[r], merge_args(cc, rank, 0, lse),
                                          rank.merge_ws(), rank.merge_workspace_bytes,
                                          stream.stream));
        return group.sync(stream.stream);
      }));
  if (f.no_verify) return Status::Ok();

  // The whole result [b, s_q, h_q, 512] (and lse): rank 0's with allgather (the others must equal
  // it bit for bit), each rank's heads put together with heads.
  const Problem& p = global.problem;
  const int heads = merged_heads(cc, world);
  const size_t rows = size_t(cc.c.batch) * p.s_q, head_bytes = kDv * dtype_bytes(p.out_dtype);
  std::vector<uint8_t> out(global.out_bytes()), part(rows * heads * head_bytes);
  std::vector<float> out_lse(global.lse_count()), part_lse(rows * heads);
  for (int r = 0; r < world; ++r) {
    MLAKIT_CUDA_RETURN(cudaSetDevice(r));
    MLAKIT_CUDA_RETURN(
        cudaMemcpy(part.data(), ranks[r].out.get(), part.size(), cudaMemcpyDeviceToHost));
    MLAKIT_CUDA_RETURN(cudaMemcpy(part_lse.data(), ranks[r].lse.get(),
                                  part_lse.size() * sizeof(float), cudaMemcpyDeviceToHost));
    if (cc.merge == CpMerge::kAllGather) {
      if (r == 0) {
        out = part;
        out_lse = part_lse;
      } else if (part != out || (lse && std::memcmp(part_lse.data(), out_lse.data(),
                                                    part_lse.size() * sizeof(float)) != 0)) {
        row->ok = false;
        row->note = str_cat("rank ", r, "'s merged result differs from rank 0's");
      }
      continue;
    }
    for (size_t i = 0; i < rows; ++i) {
      std::memcpy(&out[(i * p.h_q + r * heads) * head_bytes], &part[i * heads * head_bytes],
                  heads * head_bytes);
      std::memcpy(&out_lse[i * p.h_q + r * heads], &part_lse[i * heads], heads * sizeof(float));
    }
  }
  Reference ref;
  MLAKIT_RETURN_IF_ERROR(
      reference_for(global, std::min(cc.c.batch, std::max(1, f.verify_requests)), &ref));
  const Verdict v = judge(global, ref, out, out_lse);
  row->ok = row->ok && v.ok;
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%s %.1e", row->ok ? "ok" : "FAIL", v.cmp.rel_l2_err);
  row->check = buf;
  if (!v.ok) row->note = str_cat(row->note, row->note.empty() ? "" : "; ", v.cmp.summary());
  return Status::Ok();
}

// The unsharded decode on GPU 0, when its inputs fit there.
Status time_single(const BenchFlags& f, const Case& c, const harness::HostInputs& global,
                   const harness::TimingOptions& topt, CpRow* row) {
  MLAKIT_CUDA_RETURN(cudaSetDevice(0));
  const DeviceInfo device = current_device();
  size_t free_bytes = 0, total = 0;
  MLAKIT_CUDA_RETURN(cudaMemGetInfo(&free_bytes, &total));
  const uint64_t need = harness::device_input_bytes(c.problem, c.lens);
  if (need > free_bytes) {
    row->note = str_cat("unsharded: its inputs need ", need, " bytes, more than the ", free_bytes,
                        " free on GPU 0");
    return Status::Ok();
  }
  std::string name;
  int tactic = f.tactic;
  MLAKIT_RETURN_IF_ERROR(parse_backend(f.backend, &name, &tactic));
  std::unique_ptr<Decoder> decoder;
  MLAKIT_RETURN_IF_ERROR(Decoder::create(
      c.problem, {.backend = name, .tactic = tactic, .tune_cache_path = f.tune_cache}, &decoder));
  row->single_backend = str_cat(decoder->backend_name(c.batch), ":", decoder->tactic(c.batch));
  if (!decoder->device_memory()) {
    row->note =
        str_cat("unsharded: runs on ", decoder->backend_name(c.batch), " (host): not timed");
    return Status::Ok();
  }
  std::vector<harness::DeviceInputs> copies;
  MLAKIT_RETURN_IF_ERROR(
      harness::upload_cold_copies(global, device.l2_bytes, device.global_mem_bytes / 3, &copies));
  return harness::time_gpu(*decoder, copies, topt, &row->single);
}

// Everything that communicates: the merges checked (verify), then timed alone and within the
// whole step.
Status run_merges(const BenchFlags& f, const CpCase& cc, const harness::HostInputs& global,
                  const harness::TimingOptions& topt, std::vector<CpRank>& ranks, CpComms& comms,
                  CpRow* row) {
  const int world = f.cp.world;
  MLAKIT_RETURN_IF_ERROR(verify(f, cc, global, ranks, comms, row));

  std::vector<int> devices(world);
  std::iota(devices.begin(), devices.end(), 0);
  int copies = 1;
  for (const CpRank& rank : ranks) copies = std::max(copies, static_cast<int>(rank.copies.size()));
  const bool lse = f.sweep.lse;
  const auto merge = [&](int r, int k, Stream stream) {
    const CpRank& rank = ranks[r];
    return merge_nccl(cc.merge, comms.comms[r], merge_args(cc, rank, k, lse), rank.merge_ws(),
                      rank.merge_workspace_bytes, stream);
  };
  MLAKIT_RETURN_IF_ERROR(
      harness::time_gpu_ranks(devices, merge, copies, topt, &row->comm_rank, &row->comm));
  if (row->host_partials) return Status::Ok();
  for (int r = 0; r < world; ++r) {
    MLAKIT_CUDA_RETURN(cudaSetDevice(r));
    row->rank.emplace_back();
    MLAKIT_RETURN_IF_ERROR(
        harness::time_gpu(*ranks[r].decoder, ranks[r].copies, topt, &row->rank.back()));
  }
  std::vector<harness::Timing> step_rank;
  return harness::time_gpu_ranks(
      devices,
      [&](int r, int k, Stream stream) -> Status {
        const CpRank& rank = ranks[r];
        MLAKIT_RETURN_IF_ERROR(rank.decoder->run(rank.copies[k % rank.copies.size()].args,
                                                 rank.workspace.get(), rank.workspace_bytes,
                                                 stream));
        return merge(r, k, stream);
      },
      copies, topt, &step_rank, &row->step);
}

// A case. An error before the first merge (the unsharded decode, a rank's setup or decode) leaves
// the communicators as they were; one from the first merge on may leave some ranks' collectives
// waiting for their peers: the communicators are aborted (comms.aborted), before `ranks` is
// freed (cudaFree waits for the device).
Status bench_case(const BenchFlags& f, const CpCase& cc, CpComms& comms, CpRow* row) {
  const Case& c = cc.c;
  const int world = f.cp.world;
  harness::WorkloadOptions wopt;
  wopt.seed = f.sweep.seed;
  const harness::HostInputs global = harness::make_inputs(c.problem, c.lens, wopt);
  row->cache_bytes = global.kv.size();
  harness::TimingOptions topt;
  topt.replays = f.replays;
  topt.warmup = f.warmup;
  topt.settle_ms = f.settle_ms;
  MLAKIT_RETURN_IF_ERROR(time_single(f, c, global, topt, row));

  std::vector<CpRank> ranks(world);
  struct Release {  // the symmetric windows, whatever happens below
    std::vector<CpRank>& ranks;
    CpComms& comms;
    ~Release() { release_exchange(ranks, comms); }
  } release{ranks, comms};
  for (int r = 0; r < world; ++r) {
    Status st = setup_rank(f, cc, global, world, r, &ranks[r]);
    if (!st.ok()) return Status(st.code(), str_cat("rank ", r, ": ", st.message()));
    row->rank_cache_bytes.push_back(ranks[r].cache_bytes);
  }
  const Decoder& d0 = *ranks[0].decoder;
  row->backend = str_cat(f.backend == "auto" ? "auto>" : "", d0.backend_name(c.batch));
  row->tactic = d0.tactic(c.batch);
  row->host_partials = !d0.device_memory();
  for (const CpRank& rank : ranks) {
    if (rank.decoder->device_memory() != d0.device_memory()) {
      return unsupported("the ranks' decoders run on host and on device memory (",
                         d0.backend_name(c.batch), ", ", rank.decoder->backend_name(c.batch),
                         "): pass --backend");
    }
  }
  MLAKIT_RETURN_IF_ERROR(prepare_exchange(cc, ranks, comms, row->host_partials));
  if (row->host_partials) {
    row->note =
        str_cat(row->note, row->note.empty() ? "" : "; ", "the ranks decode on ",
                d0.backend_name(c.batch), " (host): only the merge is timed",
                f.backend == "auto" ? str_cat(" (", gpu_refusals(ranks[0].in.problem), ")") : "");
  } else {
    MLAKIT_RETURN_IF_ERROR(decode_partials(ranks));
  }
  const Status st = run_merges(f, cc, global, topt, ranks, comms, row);
  if (!st.ok()) comms.abort();
  return st;
}

// The host and device memory of each case: the unsharded inputs and one shard on the host (the
// shards' caches are released once uploaded), rank 0's shard (the largest) on each GPU. The
// unsharded decode's device copy is not required: a case that does not fit GPU 0 is run sharded
// alone (the capacity that context parallelism adds).
Status check_cp_memory(const std::vector<CpCase>& cases, int world) {
  const uint64_t host = host_memory_bytes();
  std::vector<size_t> free_bytes(world, 0);
  for (int r = 0; r < world; ++r) {
    size_t total = 0;
    MLAKIT_CUDA_RETURN(cudaSetDevice(r));
    MLAKIT_CUDA_RETURN(cudaMemGetInfo(&free_bytes[r], &total));
  }
  for (const CpCase& cc : cases) {
    const Case& c = cc.c;
    const Problem& p = c.problem;
    std::vector<int32_t> local(c.lens.size());
    for (size_t i = 0; i < local.size(); ++i) {
      local[i] = static_cast<int32_t>(cp_local_len(c.lens[i], world, 0, cc.interleave));
    }
    // One rank's partial (out and lse) of every row.
    const uint64_t partial = static_cast<uint64_t>(c.batch) * p.s_q * p.h_q *
                             (kDv * dtype_bytes(p.out_dtype) + sizeof(float));
    // The inputs, a shard, a partial, the merged result and the reference's.
    const uint64_t need =
        harness::input_bytes(p, c.lens) + harness::input_bytes(p, local) + 3 * partial;
    const auto what = [&] {
      return str_cat("case h_q ", p.h_q, ", s_q ", p.s_q, ", page ", p.page_size, ", batch ",
                     c.batch, ", seq_len ", c.seq_len, c.variable ? " (var)" : "", ", cp ", world,
                     " needs ");
    };
    if (need > host) {
      return unsupported(what(), need, " bytes of host memory, more than the ", host,
                         " this process can have");
    }
    // The shard with its partial, the merge's workspace (at most N + 1 partials: allgather's N
    // gathered ones; heads' received and packed ones are 2) and its result (at most a partial).
    const uint64_t device_need = harness::device_input_bytes(p, local) + (world + 2) * partial;
    for (int r = 0; r < world; ++r) {
      if (device_need > free_bytes[r]) {
        return unsupported(what(), device_need, " bytes of device memory on GPU ", r,
                           ", more than the ", free_bytes[r], " free there");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

int run_bench_cp(BenchFlags& f, bool run) {
  const int world = f.cp.world;
  const auto fail = [](const Status& st) {
    std::fprintf(stderr, "error: %s\n", st.to_string().c_str());
    return 2;
  };
  if (Status st = check_cp_flags(f); !st.ok()) return fail(st);
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) {
    (void)cudaGetLastError();
    gpus = 0;
  }
  if (gpus < world) {
    const DeviceInfo device = current_device();
    return fail(invalid_argument("--cp",
                                 str_cat("at most the ", gpus, " GPUs of this machine",
                                         device.present ? "" : str_cat(" (", device.error, ")")),
                                 world));
  }
  if (f.sweep.batch.empty() && f.sweep.grid.empty()) f.sweep.batch = {64};
  if (f.sweep.seq_len.empty() && f.sweep.grid.empty()) f.sweep.seq_len = {4096};
  std::vector<Case> base;
  if (Status st = make_cases(f.sweep, &base); !st.ok()) return fail(st);
  std::vector<CpCase> cases;
  for (const Case& c : base) {
    for (const int interleave : f.cp.interleave) {
      for (const std::string& m : f.cp.merge) {
        cases.push_back({c, interleave, m == "heads" ? CpMerge::kHeads : CpMerge::kAllGather,
                         m == "inplace"     ? CpExchange::kInPlace
                         : m == "symmetric" ? CpExchange::kSymmetric
                                            : CpExchange::kApart});
      }
    }
  }
  if (Status st = check_cp_memory(cases, world); !st.ok()) return fail(st);
  if (!f.json_path.empty()) {
    if (Status st = check_writable("--json", f.json_path); !st.ok()) return fail(st);
  }
  if (!run) return 0;

  CpComms comms;
  if (Status st = comms.init(world); !st.ok()) return fail(st);
  (void)cudaSetDevice(0);
  const DeviceInfo device = current_device();
  std::printf("devices: %d x %s (%d SMs); context parallel over GPUs 0..%d, NCCL %d.%d.%d\n", world,
              device.name.c_str(), device.sm_count, world - 1, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  CacheKind kind;  // make_cases accepted the flags
  (void)cache_kind(f.sweep, &kind);
  nlohmann::json results = nlohmann::json::array();
  bool all_ok = true;
  print_cp_header();
  size_t done = 0;
  for (const CpCase& cc : cases) {
    CpRow row;
    row.cc = cc;
    row.world = world;
    const Status st = bench_case(f, cc, comms, &row);
    if (!st.ok()) {
      row.ok = st.code() == StatusCode::kUnsupported && !comms.aborted;
      row.check = row.ok ? "skipped" : "ERROR";
      row.note = str_cat(row.note, row.note.empty() ? "" : "; ", st.to_string());
    }
    all_ok &= row.ok;
    print_cp_row(row);
    results.push_back(cp_row_json(row, kind));
    progress(++done, cases.size());
    if (comms.aborted) {
      return fail(Status(st.code(), str_cat("the NCCL communicators were aborted after this error "
                                            "once the merges had started; the bench stops: ",
                                            st.message())));
    }
  }
  if (!f.json_path.empty()) {
    nlohmann::json doc = {{"mlakit_version", std::string(version())},
                          {"date", iso_date()},
                          {"device", device.name},
                          {"sm_count", device.sm_count},
                          {"cp", world},
                          {"nccl_version", str_cat(NCCL_MAJOR, ".", NCCL_MINOR, ".", NCCL_PATCH)},
                          {"target", "step_us <= single_us / cp + 15"},
                          {"results", results}};
    if (!write_json_file(f.json_path, doc.dump(1))) return 1;
  }
  return all_ok ? 0 : 1;
}

}  // namespace mlakit::tools
