// The autotuner's persistent cache: a JSON file with a metadata block (GPU, SM count, driver and
// CUDA versions, library version) and one entry per bucket (winner, its time, the runner-up and
// its times on a uniform and a ragged batch). A file that does not parse or whose metadata does not
// match is ignored with a warning; writes are atomic (temp file + rename) under an advisory lock
// and merge with what the file already holds, so concurrent tuners leave a valid file with every
// entry.
#pragma once

#include <map>
#include <string>

#include "mlakit/mlakit.h"

namespace mlakit::tune {

struct Metadata {
  std::string gpu;
  int sm_count = 0;
  int driver_version = 0;
  int runtime_version = 0;
  std::string library_version;
  bool operator==(const Metadata&) const = default;
};

Metadata current_metadata(const DeviceInfo& device);

struct Entry {
  std::string backend;
  int tactic = 0;
  double time_us = 0;     // uniform batch
  double ragged_us = 0;   // ragged batch (tune::TuneOptions::ragged); 0 when not measured
  std::string runner_up;  // "" when there was one candidate
  int runner_up_tactic = 0;
  double runner_up_us = 0;
  double runner_up_ragged_us = 0;
};

class Cache {
 public:
  explicit Cache(Metadata metadata) : metadata_(std::move(metadata)) {}

  // Reads `path`. A missing file gives an empty cache; a bad or foreign one an empty cache and a
  // warning. Never fails.
  static Cache load(const std::string& path, const Metadata& metadata, std::string* warning);

  // Merges this cache's entries into the file at `path` (ours win for the same key) and replaces
  // it atomically.
  Status save(const std::string& path) const;

  const Entry* find(const std::string& key) const;
  // The entry of the same problem whose bucket is nearest (log2 distance of batch and length).
  const Entry* nearest(const Problem& problem, int batch_bucket, int len_bucket,
                       std::string* key) const;
  void put(const std::string& key, const Entry& entry) { entries_[key] = entry; }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  const Metadata& metadata() const { return metadata_; }

 private:
  Metadata metadata_;
  std::map<std::string, Entry> entries_;
};

// The cache path: `explicit_path`, else $MLAKIT_TUNE_CACHE, else "" (no cache).
std::string cache_path(const std::string& explicit_path);

}  // namespace mlakit::tune
