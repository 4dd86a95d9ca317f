#include "sm80_test_util.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/check.h"

namespace mlakit::testing {

std::string case_name(const Case& c) {
  static constexpr const char* kLens[] = {"fixed", "variable", "skewed"};
  std::ostringstream os;
  os << to_string(c.dtype) << "_page" << c.page_size << "_h" << c.h_q << "_sq" << c.s_q << "_"
     << kLens[static_cast<int>(c.lens)] << (c.sinks ? "_sinks" : "") << (c.lse ? "_lse" : "")
     << (c.causal ? "" : "_noncausal") << "_tactic" << c.tactic;
  if (c.batch > 0) os << "_b" << c.batch;
  if (c.len >= 0) os << "_L" << c.len;
  return os.str();
}

std::vector<int32_t> case_lengths(const Case& c, uint64_t seed) {
  const int rows = c.h_q * c.s_q;
  std::vector<int32_t> lens;
  switch (c.lens) {
    case Lens::kFixed: {
      // Not a multiple of any page size; long enough to be split across many CTAs.
      const int len = c.len >= 0 ? c.len : rows <= 64 ? 700 : 300;
      lens.assign(c.batch > 0 ? c.batch : 3, len);
      break;
    }
    case Lens::kVariable: {
      lens =
          harness::make_seq_lens(c.batch > 0 ? c.batch : 6, c.len >= 0 ? c.len : 160, true, seed);
      lens[0] = 0;
      if (lens.size() > 1) lens[1] = 1;
      break;
    }
    case Lens::kSkewed: {
      const int base = c.len >= 0 ? c.len : 60;
      lens = {50 * base, base, 0, 1, base + 5};
      if (c.batch > 0) lens.resize(c.batch, base);
      break;
    }
  }
  return lens;
}

Problem case_problem(const Case& c, const std::vector<int32_t>& lens) {
  Problem p;
  p.h_q = c.h_q;
  p.s_q = c.s_q;
  p.page_size = c.page_size;
  p.max_batch = static_cast<int32_t>(lens.size());
  p.max_seq_len = *std::max_element(lens.begin(), lens.end());
  p.q_dtype = p.kv_dtype = p.out_dtype = c.dtype;
  p.causal = c.causal;
  p.has_sinks = c.sinks;
  p.return_lse = c.lse;
  return p;
}

Status cpu_reference(const harness::HostInputs& in, Output* ref) {
  Problem p = in.problem;
  p.enable_pdl = false;
  std::unique_ptr<Decoder> cpu;
  MLAKIT_RETURN_IF_ERROR(Decoder::create(p, {.backend = "cpu"}, &cpu));
  ref->out.assign(in.out_bytes() / 2, 0);
  ref->lse.assign(p.return_lse ? in.lse_count() : 0, 0.0f);
  return cpu->run(in.args(ref->out.data(), p.return_lse ? ref->lse.data() : nullptr), nullptr, 0,
                  nullptr);
}

Status run_device(const Decoder& decoder, const harness::HostInputs& in,
                  const harness::DeviceInputs& device, void* workspace, cudaStream_t stream,
                  Output* got) {
  MLAKIT_RETURN_IF_ERROR(device.poison(in));
  if (cudaDeviceSynchronize() != cudaSuccess) {
    return Status(StatusCode::kCudaError, "cudaDeviceSynchronize after poisoning");
  }
  MLAKIT_RETURN_IF_ERROR(decoder.run(device.args, workspace, decoder.workspace_bytes(), stream));
  const cudaError_t err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) {
    return Status(StatusCode::kCudaError,
                  std::string("cudaStreamSynchronize after run: ") + cudaGetErrorString(err));
  }
  got->out.assign(in.out_bytes() / 2, 0);
  got->lse.assign(in.problem.return_lse ? in.lse_count() : 0, 0.0f);
  return device.download(in, got->out.data(), in.problem.return_lse ? got->lse.data() : nullptr);
}

::testing::AssertionResult matches_reference(const harness::HostInputs& in, const Output& got,
                                             const Output& ref) {
  const Problem& p = in.problem;
  const bool lse = p.return_lse;
  const harness::Comparison cmp =
      harness::compare(p, in.batch, got.out.data(), ref.out.data(), lse ? got.lse.data() : nullptr,
                       lse ? ref.lse.data() : nullptr);
  const harness::Tolerance tol = harness::default_tolerance(p);
  if (cmp.passes(tol.rtol, tol.atol, tol.lse_atol)) {
    return ::testing::AssertionSuccess() << cmp.summary();
  }
  return ::testing::AssertionFailure() << cmp.summary() << " (tolerance: " << tol.atol << " + "
                                       << tol.rtol << " * ref max, lse " << tol.lse_atol << ")";
}

::testing::AssertionResult bitwise_equal(const Output& a, const Output& b) {
  if (a.out.size() != b.out.size() || a.lse.size() != b.lse.size()) {
    return ::testing::AssertionFailure() << "sizes differ";
  }
  for (size_t k = 0; k < a.out.size(); ++k) {
    if (a.out[k] != b.out[k]) {
      return ::testing::AssertionFailure() << "out differs at element " << k << ": 0x" << std::hex
                                           << a.out[k] << " vs 0x" << b.out[k];
    }
  }
  if (!a.lse.empty() && std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4) != 0) {
    return ::testing::AssertionFailure() << "lse differs";
  }
  return ::testing::AssertionSuccess();
}

bool timing_shape_selected(int index) {
  const char* only = std::getenv("MLAKIT_TIMING_SHAPES");
  return only == nullptr ||
         (std::string(",") + only + ",").find("," + std::to_string(index) + ",") !=
             std::string::npos;
}

}  // namespace mlakit::testing
