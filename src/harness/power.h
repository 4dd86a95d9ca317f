// The GPU's SM clock and board power while a timed region runs, read through NVML (the driver's
// management library, loaded at run time: nothing is linked, and without a driver it reports
// nothing). Under a power cap the clock drops, so a time alone does not say whether a change saved
// cycles or energy; the clock and power beside it do (docs/sm90-decode.md, "The power cap").
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace mlakit::harness {

// NVML's clock and power readings lag the hardware. On an H200 one power-capped kernel (608-616
// us a call) read anywhere from 1,575 to 1,980 MHz over 0.2 s windows and 1,545-1,605 MHz over
// 4-5 s ones, so only readings over a long window describe it (kMinPowerWindowMs).
inline constexpr double kMinPowerWindowMs = 1000.0;

struct PowerReading {
  int samples = 0;            // 0: not available (no NVML, no device, or the region was too short)
  double window_ms = 0;       // how long the sampler ran
  double sm_mhz = 0;          // median SM clock over the samples
  double power_w = 0;         // mean instantaneous board power over the samples (0: not reported)
  bool power_capped = false;  // a sample saw the software or hardware power cap hold the clock
};

// Samples one device every `period_ms` on a thread of its own between start() and stop().
class PowerSampler {
 public:
  // `cuda_device`: the CUDA ordinal (matched to NVML by PCI bus id).
  explicit PowerSampler(int cuda_device, int period_ms = 2);
  ~PowerSampler();
  PowerSampler(const PowerSampler&) = delete;
  PowerSampler& operator=(const PowerSampler&) = delete;

  bool available() const { return device_ != nullptr; }
  // Why it is not available ("" when it is).
  const std::string& why_not() const { return why_not_; }
  void start();
  PowerReading stop();

 private:
  struct Sample {
    unsigned mhz = 0, mw = 0;
    bool capped = false;
  };
  void loop();

  void* device_ = nullptr;  // nvmlDevice_t
  int period_ms_;
  std::string why_not_;
  std::atomic<bool> running_{false};
  std::thread thread_;
  std::vector<Sample> samples_;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace mlakit::harness
