#include "tune/cache.h"

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "tune/bucket.h"

namespace mlakit::tune {
namespace {

using nlohmann::json;

// 2: entries chosen on a uniform and a ragged batch (tune::rank), with "ragged_us" and
// "runner_up_ragged_us". Files of format 1 chose on the uniform batch alone and are ignored.
constexpr int kFormatVersion = 2;

json to_json(const Metadata& m) {
  return {{"gpu", m.gpu},
          {"sm_count", m.sm_count},
          {"driver_version", m.driver_version},
          {"runtime_version", m.runtime_version},
          {"library_version", m.library_version}};
}

json to_json(const Entry& e) {
  return {{"backend", e.backend},           {"tactic", e.tactic},
          {"time_us", e.time_us},           {"ragged_us", e.ragged_us},
          {"runner_up", e.runner_up},       {"runner_up_tactic", e.runner_up_tactic},
          {"runner_up_us", e.runner_up_us}, {"runner_up_ragged_us", e.runner_up_ragged_us}};
}

// Parses a cache document; returns false (with the reason) on any structural problem.
bool parse(const std::string& text, Metadata* meta, std::map<std::string, Entry>* entries,
           std::string* why) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    *why = "not valid JSON";
    return false;
  }
  try {
    if (doc.at("format").get<int>() != kFormatVersion) {
      *why = str_cat("format ", doc.at("format").dump(), " (expected ", kFormatVersion, ")");
      return false;
    }
    const json& m = doc.at("metadata");
    meta->gpu = m.at("gpu").get<std::string>();
    meta->sm_count = m.at("sm_count").get<int>();
    meta->driver_version = m.at("driver_version").get<int>();
    meta->runtime_version = m.at("runtime_version").get<int>();
    meta->library_version = m.at("library_version").get<std::string>();
    for (const auto& [key, e] : doc.at("entries").items()) {
      Entry entry{.backend = e.at("backend").get<std::string>(),
                  .tactic = e.at("tactic").get<int>(),
                  .time_us = e.at("time_us").get<double>(),
                  .ragged_us = e.value("ragged_us", 0.0),
                  .runner_up = e.value("runner_up", std::string()),
                  .runner_up_tactic = e.value("runner_up_tactic", 0),
                  .runner_up_us = e.value("runner_up_us", 0.0),
                  .runner_up_ragged_us = e.value("runner_up_ragged_us", 0.0)};
      (*entries)[key] = entry;
    }
  } catch (const json::exception& e) {
    *why = str_cat("unexpected structure (", e.what(), ")");
    return false;
  }
  return true;
}

bool read_file(const std::string& path, std::string* text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *text = ss.str();
  return true;
}

std::string describe(const Metadata& m) {
  return str_cat(m.gpu, ", ", m.sm_count, " SMs, driver ", m.driver_version, ", runtime ",
                 m.runtime_version, ", mlakit ", m.library_version);
}

// An advisory lock on "<path>.lock", released on destruction.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~FileLock() {
    if (fd_ >= 0) {
      ::flock(fd_, LOCK_UN);
      ::close(fd_);
    }
  }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace

Metadata current_metadata(const DeviceInfo& device) {
  Metadata m;
  m.gpu = device.present ? device.name : "cpu";
  m.sm_count = device.sm_count;
  if (cudaDriverGetVersion(&m.driver_version) != cudaSuccess) m.driver_version = 0;
  if (cudaRuntimeGetVersion(&m.runtime_version) != cudaSuccess) m.runtime_version = 0;
  (void)cudaGetLastError();
  m.library_version = std::string(version());
  return m;
}

std::string cache_path(const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  const char* env = std::getenv("MLAKIT_TUNE_CACHE");
  return env != nullptr ? env : "";
}

Cache Cache::load(const std::string& path, const Metadata& metadata, std::string* warning) {
  Cache cache(metadata);
  std::string text;
  if (path.empty() || !read_file(path, &text)) return cache;  // no file yet: nothing to trust
  Metadata found;
  std::map<std::string, Entry> entries;
  std::string why;
  if (!parse(text, &found, &entries, &why)) {
    if (warning) *warning = str_cat("tune cache ", path, " ignored: ", why);
    return cache;
  }
  if (!(found == metadata)) {
    if (warning) {
      *warning = str_cat("tune cache ", path, " ignored: it was made for ", describe(found),
                         ", this machine is ", describe(metadata));
    }
    return cache;
  }
  cache.entries_ = std::move(entries);
  return cache;
}

Status Cache::save(const std::string& path) const {
  if (path.empty()) return invalid_argument("tune cache path", "a file path", "\"\"");
  FileLock lock(path);
  if (!lock.ok()) {
    return Status(StatusCode::kInternal, str_cat("cannot lock ", path, ".lock"));
  }
  // Merge: keep what the file holds for this machine, ours win for the same key.
  std::map<std::string, Entry> merged;
  std::string text, why;
  Metadata found;
  if (read_file(path, &text) && parse(text, &found, &merged, &why) && !(found == metadata_)) {
    merged.clear();  // another machine's file: replaced by this machine's results
  }
  for (const auto& [key, entry] : entries_) merged[key] = entry;

  json entries = json::object();
  for (const auto& [key, entry] : merged) entries[key] = to_json(entry);
  const json doc = {
      {"format", kFormatVersion}, {"metadata", to_json(metadata_)}, {"entries", entries}};
  const std::string tmp = str_cat(path, ".tmp.", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << doc.dump(1) << "\n";
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return Status(StatusCode::kInternal, str_cat("cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status(StatusCode::kInternal, str_cat("cannot rename ", tmp, " to ", path));
  }
  return Status::Ok();
}

const Entry* Cache::find(const std::string& key) const {
  const auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

const Entry* Cache::nearest(const Problem& problem, int batch_bkt, int len_bkt,
                            std::string* key) const {
  const std::string prefix = problem_key(problem) + "|";
  const Entry* best = nullptr;
  double best_distance = 0;
  for (const auto& [k, entry] : entries_) {
    if (k.compare(0, prefix.size(), prefix) != 0) continue;
    int b = 0, l = 0;
    if (std::sscanf(k.c_str() + prefix.size(), "b%d|L%d", &b, &l) != 2 || b <= 0 || l <= 0) {
      continue;
    }
    const double distance = std::fabs(std::log2(static_cast<double>(b) / batch_bkt)) +
                            std::fabs(std::log2(static_cast<double>(l) / len_bkt));
    if (best == nullptr || distance < best_distance) {
      best = &entry;
      best_distance = distance;
      if (key) *key = k;
    }
  }
  return best;
}

}  // namespace mlakit::tune
