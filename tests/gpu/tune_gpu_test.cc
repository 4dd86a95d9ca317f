// The autotuner on the GPU: `auto` gives the results of the backend it picked; tuning at Decoder
// creation writes the cache; tuning refuses to run while the stream captures a graph, and the
// captured call still works.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/check.h"
#include "harness/workload.h"
#include "sm80_test_util.h"
#include "tune/bucket.h"
#include "tune/cache.h"
#include "tune/tuner.h"

namespace mlakit::testing {
namespace {

std::string temp_cache(const std::string& name) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("mlakit_tune_gpu_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove(path);
  return path.string();
}

Problem small_problem() {
  return Problem{.h_q = 16, .page_size = 64, .max_batch = 4, .max_seq_len = 700};
}

harness::HostInputs small_inputs(const Problem& p, uint64_t seed) {
  return harness::make_inputs(p, std::vector<int32_t>{700, 1, 0, 333}, {.seed = seed});
}

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
  ~Stream() { cudaStreamDestroy(s); }
};

// Untuned, on an sm_90 device: sm90 everywhere, with its default tactic for the row count, the
// batch bucket and the maximum length (sm90_backend.cc): cluster tactics up to 2048 tokens or at
// batch 1, persistent ones above; the narrow tile's up to 16 query rows.
TEST(TuneGpu, UntunedHeuristicPrefersTheFasterBackendOnSm90) {
  MLAKIT_SKIP_WITHOUT_SM90();
  const std::string none = temp_cache("untuned.json");
  const struct {
    int h_q, s_q, max_seq_len, batch;
    int tactic;
  } expected[] = {{16, 1, 4096, 8, 3},  {8, 2, 4096, 8, 3},  {16, 2, 4096, 8, 0},
                  {128, 1, 4096, 8, 0}, {16, 1, 4096, 1, 5}, {128, 1, 4096, 1, 2},
                  {16, 1, 1024, 8, 5},  {16, 2, 2048, 8, 2}, {128, 1, 1024, 8, 2}};
  for (const auto& e : expected) {
    const Problem p{
        .h_q = e.h_q, .s_q = e.s_q, .page_size = 64, .max_batch = 8, .max_seq_len = e.max_seq_len};
    std::unique_ptr<Decoder> d;
    MLAKIT_ASSERT_OK(Decoder::create(p, {.tune_cache_path = none}, &d));
    const std::string what =
        str_cat("h_q ", e.h_q, " s_q ", e.s_q, " L ", e.max_seq_len, " batch ", e.batch);
    EXPECT_EQ(d->backend_name(e.batch), "sm90") << what;
    EXPECT_EQ(d->tactic(e.batch), e.tactic) << what;
  }
}

// The sm90 backend named without a tactic takes the same per-bucket default as auto's heuristic.
TEST(TuneGpu, NamedBackendDefaultTacticPerBatchBucket) {
  MLAKIT_SKIP_WITHOUT_SM90();
  const Problem p{.h_q = 128, .page_size = 64, .max_batch = 64, .max_seq_len = 4096};
  std::unique_ptr<Decoder> named, automatic;
  MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = "sm90"}, &named));
  MLAKIT_ASSERT_OK(Decoder::create(p, {.tune_cache_path = temp_cache("named.json")}, &automatic));
  for (const int batch : {1, 2, 8, 64}) {
    EXPECT_EQ(named->tactic(batch), automatic->tactic(batch)) << "batch " << batch;
  }
  EXPECT_EQ(named->tactic(1), 2);   // cluster at batch 1
  EXPECT_EQ(named->tactic(64), 0);  // persistent above 2048 tokens
}

TEST(TuneGpu, AutoMatchesTheBackendItPicked) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const Problem p = small_problem();
  const harness::HostInputs in = small_inputs(p, 101);
  harness::DeviceInputs dev;
  MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &dev));
  std::unique_ptr<Decoder> automatic, explicit_decoder;
  MLAKIT_ASSERT_OK(Decoder::create(p, {.tune_cache_path = temp_cache("none.json")}, &automatic));
  MLAKIT_ASSERT_OK(Decoder::create(p,
                                   {.backend = std::string(automatic->backend_name(in.batch)),
                                    .tactic = automatic->tactic(in.batch)},
                                   &explicit_decoder));
  Stream stream;
  harness::DeviceBuffer ws(std::max<size_t>(automatic->workspace_bytes(), 256));
  Output a, b, ref;
  MLAKIT_ASSERT_OK(run_device(*automatic, in, dev, ws.get(), stream.s, &a));
  MLAKIT_ASSERT_OK(run_device(*explicit_decoder, in, dev, ws.get(), stream.s, &b));
  MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
  EXPECT_TRUE(bitwise_equal(a, b));
  EXPECT_TRUE(matches_reference(in, a, ref));
}

TEST(TuneGpu, TuningAtCreationFillsTheCacheAndAutoUsesIt) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const Problem p = small_problem();
  const std::string path = temp_cache("tuned.json");
  std::unique_ptr<Decoder> tuned;
  MLAKIT_ASSERT_OK(Decoder::create(p, {.tune_cache_path = path, .tune = true}, &tuned));
  const tune::Cache cache =
      tune::Cache::load(path, tune::current_metadata(current_device()), nullptr);
  const std::string key =
      tune::bucket_key(p, tune::batch_bucket(p.max_batch), tune::len_bucket(p.max_seq_len));
  const tune::Entry* entry = cache.find(key);
  ASSERT_NE(entry, nullptr) << "no entry " << key << "; notes: " << tuned->notes();
  EXPECT_GT(entry->time_us, 0);
  EXPECT_GT(entry->ragged_us, 0);  // batch bucket 4: the ragged batch is timed too
  EXPECT_EQ(tuned->backend_name(p.max_batch), entry->backend);
  EXPECT_EQ(tuned->tactic(p.max_batch), entry->tactic);
  EXPECT_NE(tuned->notes().find("(cache)"), std::string::npos) << tuned->notes();

  // A second decoder reads the entry without measuring.
  std::unique_ptr<Decoder> again;
  MLAKIT_ASSERT_OK(Decoder::create(p, {.tune_cache_path = path}, &again));
  EXPECT_EQ(again->backend_name(p.max_batch), entry->backend);
  EXPECT_EQ(again->tactic(p.max_batch), entry->tactic);
}

// An fp8 cache, in both compute modes: tuning at creation times the fp8 tactics of every backend
// that runs them into the problem's own bucket (the key names the dtypes), and the tuned decoder's
// result matches the reference.
TEST(TuneGpu, Fp8ProblemsAreTunedInTheirOwnBuckets) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const std::string path = temp_cache("fp8.json");
  uint64_t seed = 60;
  for (const DType q : {DType::kBF16, DType::kFP8E4M3}) {
    SCOPED_TRACE(::testing::Message() << "q " << to_string(q));
    Problem p = small_problem();
    p.kv_dtype = DType::kFP8E4M3;
    p.q_dtype = q;
    std::unique_ptr<Decoder> tuned;
    MLAKIT_ASSERT_OK(Decoder::create(p, {.tune_cache_path = path, .tune = true}, &tuned));
    const tune::Cache cache =
        tune::Cache::load(path, tune::current_metadata(current_device()), nullptr);
    const std::string key =
        tune::bucket_key(p, tune::batch_bucket(p.max_batch), tune::len_bucket(p.max_seq_len));
    EXPECT_NE(key.find(str_cat("q-", to_string(q))), std::string::npos) << key;
    const tune::Entry* entry = cache.find(key);
    ASSERT_NE(entry, nullptr) << "no entry " << key << "; notes: " << tuned->notes();
    EXPECT_EQ(tuned->backend_name(p.max_batch), entry->backend);
    EXPECT_EQ(tuned->tactic(p.max_batch), entry->tactic);

    const harness::HostInputs in = small_inputs(p, seed++);
    Output ref, got;
    MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
    harness::DeviceInputs dev;
    MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &dev));
    harness::DeviceBuffer workspace(std::max<size_t>(tuned->workspace_bytes(), 256));
    Stream s;
    MLAKIT_ASSERT_OK(run_device(*tuned, in, dev, workspace.get(), s.s, &got));
    EXPECT_TRUE(matches_reference(in, got, ref)) << entry->backend << ":" << entry->tactic;
  }
}

// Every candidate is timed on both batches and the entry is rank()'s winner; with
// `ragged = false`, or at batch 1, only the uniform batch is timed.
TEST(TuneGpu, TuneBucketTimesTheUniformAndTheRaggedBatch) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const Problem p = small_problem();
  for (const bool ragged : {true, false}) {
    for (const int batch : {1, 8}) {
      std::vector<tune::Measurement> measured;
      tune::Entry entry;
      MLAKIT_ASSERT_OK(
          tune::tune_bucket(p, batch, 1024, {.ragged = ragged, .replays = 3}, &measured, &entry));
      const bool both = ragged && batch > 1;
      int timed = 0;
      for (const tune::Measurement& m : measured) {
        if (!m.status.ok()) continue;
        ++timed;
        EXPECT_GT(m.time_us, 0) << m.candidate.label;
        EXPECT_EQ(m.ragged_us > 0, both) << m.candidate.label << " batch " << batch;
      }
      ASSERT_GT(timed, 1);  // at least sm80's two tactics
      const std::vector<const tune::Measurement*> ranked = tune::rank(measured);
      ASSERT_GE(ranked.size(), 2u);
      EXPECT_EQ(entry.backend, ranked[0]->candidate.backend);
      EXPECT_EQ(entry.tactic, ranked[0]->candidate.tactic);
      EXPECT_EQ(entry.time_us, ranked[0]->time_us);
      EXPECT_EQ(entry.ragged_us, ranked[0]->ragged_us);
      EXPECT_EQ(entry.ragged_us > 0, both);
      EXPECT_EQ(entry.runner_up_tactic, ranked[1]->candidate.tactic);
    }
  }
}

TEST(TuneGpu, NoTuningWhileTheStreamCapturesAndTheCapturedCallWorks) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const Problem p = small_problem();
  const harness::HostInputs in = small_inputs(p, 202);
  harness::DeviceInputs dev;
  MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &dev));
  MLAKIT_ASSERT_OK(dev.poison(in));
  const std::string path = temp_cache("capture.json");
  Stream stream;

  // Allocated before capture (no allocation while capturing); larger than any workspace of this
  // small problem, checked below.
  harness::DeviceBuffer ws(size_t{64} << 20);
  MLAKIT_ASSERT_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
  std::unique_ptr<Decoder> decoder;
  const Status created =
      Decoder::create(p, {.tune_cache_path = path, .tune = true, .stream = stream.s}, &decoder);
  Status ran = created;
  if (created.ok() && decoder->workspace_bytes() <= ws.size()) {
    ran = decoder->run(dev.args, ws.get(), decoder->workspace_bytes(), stream.s);
  }
  cudaGraph_t graph = nullptr;
  MLAKIT_ASSERT_CUDA(cudaStreamEndCapture(stream.s, &graph));
  MLAKIT_ASSERT_OK(created);
  MLAKIT_ASSERT_OK(ran);
  ASSERT_LE(decoder->workspace_bytes(), ws.size());
  EXPECT_NE(decoder->notes().find("tuning skipped"), std::string::npos) << decoder->notes();
  EXPECT_FALSE(std::filesystem::exists(path)) << "nothing may be measured or written";

  cudaGraphExec_t exec = nullptr;
  MLAKIT_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  MLAKIT_ASSERT_CUDA(cudaGraphLaunch(exec, stream.s));
  MLAKIT_ASSERT_CUDA(cudaStreamSynchronize(stream.s));
  Output got, ref;
  got.out.resize(in.out_bytes() / 2);
  MLAKIT_ASSERT_OK(dev.download(in, got.out.data(), nullptr));
  MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
  EXPECT_TRUE(matches_reference(in, got, ref));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace mlakit::testing
