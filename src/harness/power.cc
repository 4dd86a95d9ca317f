#include "harness/power.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <mutex>

namespace mlakit::harness {
namespace {

// The few NVML entry points used, declared here (the toolkit on the build machine ships no
// nvml.h; these signatures are NVML's stable C ABI).
using nvmlReturn = int;  // 0: NVML_SUCCESS
using nvmlDevice = void*;
constexpr int kNvmlClockSm = 1;                     // NVML_CLOCK_SM
constexpr unsigned kPowerInstant = 186;             // NVML_FI_DEV_POWER_INSTANT, milliwatts
constexpr unsigned long long kSwPowerCap = 0x4;     // nvmlClocksEventReasonSwPowerCap
constexpr unsigned long long kHwPowerBrake = 0x80;  // nvmlClocksEventReasonHwPowerBrakeSlowdown

// nvmlFieldValue_t. (nvmlDeviceGetPowerUsage is not used: since Ampere it is a one-second
// average, longer than most timed regions.)
struct FieldValue {
  unsigned field_id = 0, scope_id = 0;
  long long timestamp = 0, latency_us = 0;
  int value_type = 0;   // nvmlValueType_t: 1 unsigned int, 2 unsigned long, 3 unsigned long long
  int nvml_return = 0;  // per field
  unsigned long long value = 0;  // nvmlValue_t, an 8-byte union
};
static_assert(sizeof(FieldValue) == 40, "nvmlFieldValue_t is 40 bytes");

struct Nvml {
  nvmlReturn (*init)() = nullptr;
  nvmlReturn (*by_pci)(const char*, nvmlDevice*) = nullptr;
  nvmlReturn (*clock)(nvmlDevice, int, unsigned*) = nullptr;
  nvmlReturn (*fields)(nvmlDevice, int, FieldValue*) = nullptr;
  nvmlReturn (*reasons)(nvmlDevice, unsigned long long*) = nullptr;
  std::string error;
};

template <typename F>
bool bind(void* lib, const char* name, F* f) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  return *f != nullptr;
}

// Loaded and initialized once per process; never unloaded (NVML keeps threads of its own).
const Nvml& nvml() {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      n.error = "libnvidia-ml.so.1 not found";
      return;
    }
    const bool ok = bind(lib, "nvmlInit_v2", &n.init) &&
                    bind(lib, "nvmlDeviceGetHandleByPciBusId_v2", &n.by_pci) &&
                    bind(lib, "nvmlDeviceGetClockInfo", &n.clock) &&
                    bind(lib, "nvmlDeviceGetFieldValues", &n.fields) &&
                    bind(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", &n.reasons);
    if (!ok) {
      n = Nvml{};
      n.error = "libnvidia-ml.so.1 lacks an expected entry point";
      return;
    }
    if (const nvmlReturn r = n.init(); r != 0) {
      n = Nvml{};
      n.error = "nvmlInit_v2 returned " + std::to_string(r);
    }
  });
  return n;
}

}  // namespace

PowerSampler::PowerSampler(int cuda_device, int period_ms) : period_ms_(std::max(1, period_ms)) {
  const Nvml& n = nvml();
  if (n.init == nullptr) {
    why_not_ = n.error;
    return;
  }
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), cuda_device) != cudaSuccess) {
    cudaGetLastError();
    why_not_ = "cudaDeviceGetPCIBusId failed for device " + std::to_string(cuda_device);
    return;
  }
  nvmlDevice d = nullptr;
  if (const nvmlReturn r = n.by_pci(bus, &d); r != 0) {
    why_not_ = std::string("no NVML device at PCI bus id ") + bus + " (" + std::to_string(r) + ")";
    return;
  }
  device_ = d;
}

PowerSampler::~PowerSampler() {
  if (running_) stop();
}

void PowerSampler::start() {
  if (!available() || running_) return;
  samples_.clear();
  started_ = std::chrono::steady_clock::now();
  running_ = true;
  thread_ = std::thread([this] { loop(); });
}

void PowerSampler::loop() {
  const Nvml& n = nvml();
  while (running_.load(std::memory_order_relaxed)) {
    Sample s;
    unsigned long long why = 0;
    FieldValue power;
    power.field_id = kPowerInstant;
    if (n.clock(device_, kNvmlClockSm, &s.mhz) == 0) {
      if (n.fields(device_, 1, &power) == 0 && power.nvml_return == 0) {
        s.mw = power.value_type == 1 ? static_cast<unsigned>(power.value & 0xffffffffu)
                                     : static_cast<unsigned>(power.value);
      }
      if (n.reasons(device_, &why) == 0) s.capped = (why & (kSwPowerCap | kHwPowerBrake)) != 0;
      samples_.push_back(s);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(period_ms_));
  }
}

PowerReading PowerSampler::stop() {
  PowerReading r;
  if (!running_) return r;
  running_ = false;
  thread_.join();
  r.window_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_)
          .count();
  if (samples_.empty()) return r;
  std::vector<unsigned> mhz;
  double mw = 0;
  int with_power = 0;
  for (const Sample& s : samples_) {
    mhz.push_back(s.mhz);
    mw += s.mw;
    with_power += s.mw > 0;
    r.power_capped |= s.capped;
  }
  std::nth_element(mhz.begin(), mhz.begin() + mhz.size() / 2, mhz.end());
  r.samples = static_cast<int>(samples_.size());
  r.sm_mhz = mhz[mhz.size() / 2];
  r.power_w = with_power > 0 ? mw / with_power / 1000.0 : 0.0;  // 0: not reported
  return r;
}

}  // namespace mlakit::harness
