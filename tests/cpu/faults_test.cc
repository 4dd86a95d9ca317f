// Host faults at the API boundary: a host allocation that fails (std::bad_alloc) or a thread that
// cannot be started (std::system_error) inside a call gives a Status, or the call completes with
// fewer threads; neither ends the process. Each case runs in a child process whose address space
// is limited (RLIMIT_AS) to a little more than it holds, so that the next large allocation or
// thread stack fails; before these were caught, the child died of an uncaught exception.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cpu_run.h"
#include "harness/workload.h"
#include "mlakit/mlakit.h"
#include "mlakit/mlakit_c.h"
#include "sanitizers.h"

namespace mlakit_test {
namespace {

// Limits this process's address space to what it maps now plus `headroom` bytes.
void limit_address_space(uint64_t headroom) {
  uint64_t pages = 0;
  std::ifstream("/proc/self/statm") >> pages;
  const rlim_t limit = pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) + headroom;
  const rlimit rl{.rlim_cur = limit, .rlim_max = RLIM_INFINITY};
  ::setrlimit(RLIMIT_AS, &rl);
}

// Runs `body` in a child process: the child's exit code, 99 when an exception escaped the body,
// or 128 + the signal that ended it.
int in_child(const std::function<int()>& body) {
  const pid_t child = ::fork();
  if (child == 0) {
    try {
      ::_exit(body());
    } catch (...) {
      ::_exit(99);
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class Faults : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef MLAKIT_SANITIZED
    GTEST_SKIP() << "sanitizers reserve address space that RLIMIT_AS cannot leave room for";
#endif
  }
};

// One request of 2^20 cached tokens that all read page 0: a cache of one page, but the cpu
// backend's scratch is 40 MB for each of its two blocks of 8 heads (run on two threads where
// there are two cores: the worker thread's exception is the one that ended the process).
struct LongRequest {
  Problem problem{.h_q = 16, .page_size = 64, .max_batch = 1, .max_seq_len = 1 << 20};
  std::vector<uint16_t> q = std::vector<uint16_t>(16 * mlakit::kDqk, 0x3f80);  // bf16 1.0
  std::vector<uint16_t> kv = std::vector<uint16_t>(64 * mlakit::kDqk, 0x3f80);
  std::vector<uint16_t> out = std::vector<uint16_t>(16 * mlakit::kDv);
  std::vector<int32_t> table = std::vector<int32_t>((1 << 20) / 64, 0);
  std::vector<int32_t> lens{1 << 20};
  RunArgs args{.batch = 1,
               .q = q.data(),
               .kv_cache = kv.data(),
               .num_pages = 1,
               .block_table = table.data(),
               .block_table_stride = static_cast<int64_t>(table.size()),
               .seq_lens = lens.data(),
               .out = out.data()};
};

TEST_F(Faults, OutOfHostMemoryInARunIsAStatus) {
  EXPECT_EQ(in_child([] {
              LongRequest r;
              std::unique_ptr<Decoder> decoder;
              if (!Decoder::create(r.problem, {.backend = "cpu"}, &decoder).ok()) return 10;
              limit_address_space(16 << 20);
              const Status st = decoder->run(r.args, nullptr, 0, nullptr);
              if (st.code() != StatusCode::kInternal) return 11;
              return st.message() == "Decoder::run: out of host memory (std::bad_alloc)" ? 0 : 12;
            }),
            0);
}

TEST_F(Faults, OutOfHostMemoryThroughTheCApiIsAStatus) {
  EXPECT_EQ(in_child([] {
              LongRequest r;
              mlakit_problem_t p;
              mlakit_problem_init(&p);
              p.h_q = 16, p.max_batch = 1, p.max_seq_len = 1 << 20;
              mlakit_decoder_t* decoder = nullptr;
              if (mlakit_decoder_create(&p, "cpu", &decoder) != 0) return 10;
              mlakit_run_args_t a;
              mlakit_run_args_init(&a);
              a.batch = 1, a.q = r.q.data(), a.kv_cache = r.kv.data(), a.num_pages = 1;
              a.block_table = r.table.data(), a.block_table_stride = r.args.block_table_stride;
              a.seq_lens = r.lens.data(), a.out = r.out.data();
              limit_address_space(16 << 20);
              if (mlakit_decoder_run(decoder, &a, nullptr, 0, nullptr) != 4) return 11;
              const std::string error = mlakit_last_error();
              return error.find("out of host memory") != std::string::npos ? 0 : 12;
            }),
            0);
}

// New threads get stacks of 256 MB, which do not fit the limit (freed 8 MB stacks that glibc
// keeps for reuse would): the run completes on the threads it has, with the same result.
TEST_F(Faults, ThreadsThatCannotStartLeaveTheWorkToTheOthers) {
  EXPECT_EQ(in_child([] {
              const Problem p{.h_q = 128, .page_size = 16, .max_batch = 3, .max_seq_len = 256};
              const HostInputs in =
                  mlakit::harness::make_inputs(p, std::vector<int32_t>{40, 200, 1}, {.seed = 5});
              const CpuRun before = run_cpu(in);
              if (!before.status.ok()) return 10;
              std::unique_ptr<Decoder> decoder;
              if (!Decoder::create(p, {.backend = "cpu"}, &decoder).ok()) return 11;
              std::vector<uint8_t> out(in.out_bytes());
              pthread_attr_t attr;
              ::pthread_attr_init(&attr);
              ::pthread_attr_setstacksize(&attr, size_t{256} << 20);
              ::pthread_setattr_default_np(&attr);
              limit_address_space(4 << 20);
              const Status st = decoder->run(in.args(out.data(), nullptr), nullptr, 0, nullptr);
              if (!st.ok()) return 12;
              return out == before.out ? 0 : 13;
            }),
            0);
}

// The cpu backend's scratch is known at creation: up to 640 MB for each thread at max_seq_len
// 2^24 (a block of 8 heads). Where the process cannot have that much, creation refuses with the
// bytes it needs, before anything is allocated; before, the run failed (or ended the process).
TEST_F(Faults, CreationRefusesScratchThatCannotBeHad) {
  EXPECT_EQ(in_child([] {
              limit_address_space(256 << 20);
              const Problem huge{.h_q = 8, .max_batch = 1, .max_seq_len = 1 << 24};
              std::unique_ptr<Decoder> decoder;
              const Status st = Decoder::create(huge, {.backend = "cpu"}, &decoder);
              if (st.code() != StatusCode::kUnsupported) return 10;
              if (st.message().rfind("cpu backend: a run needs 805", 0) != 0) return 11;
              if (st.message().find("bytes of host memory") == std::string::npos) return 12;
              if (mlakit::can_run("cpu", huge).message() != st.message()) return 13;
              const Problem fits{.h_q = 8, .max_batch = 1, .max_seq_len = 1 << 16};
              return Decoder::create(fits, {.backend = "cpu"}, &decoder).ok() ? 0 : 15;
            }),
            0);
}

}  // namespace
}  // namespace mlakit_test
