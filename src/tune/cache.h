// The autotuner's persistent cache: a JSON file with a metadata block (GPU, SM count, driver and
// CUDA versions, library version) and one entry per bucket (winner, its time, the runner-up and
// its times on a uniform and a ragged batch). A file that does not parse, holds a value outside
// its field's range, is not a regular file, is larger than kMaxFileBytes or whose metadata does
// not match is ignored with a warning; writes are atomic (temp file + rename) under an advisory
// lock and merge with what the file already holds, so concurrent tuners leave a valid file with
// every entry.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

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

// The largest cache file read. Real caches are far smaller (an entry takes about 300 bytes; the
// standard grid is some 20 entries per problem), and the parser's tree takes up to 18x the text:
// 300 MB for 16 MiB of a hostile file of one-character members (measured, nlohmann-json 3.11).
inline constexpr size_t kMaxFileBytes = size_t{16} << 20;

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
  // The entry of the same problem whose bucket is nearest (sum of the log2 distances of batch and
  // length; ties: the smaller batch, then the shorter length). Looks at the problem's entries
  // only, batch buckets nearest first and one length per batch bucket, so that choosing for each
  // of a Decoder's thousands of batch buckets does not read every entry each time.
  const Entry* nearest(const Problem& problem, int batch_bucket, int len_bucket,
                       std::string* key) const;
  // `key` is a bucket key: problem_key + "|b<batch bucket>|L<length bucket>".
  void put(const std::string& key, const Entry& entry);
  const std::map<std::string, Entry>& entries() const { return entries_; }
  const Metadata& metadata() const { return metadata_; }

 private:
  struct Tuned {  // an entry of entries_, by its bucket
    int batch = 0, len = 0;
    double log_batch = 0, log_len = 0;
    const std::string* key = nullptr;
    const Entry* entry = nullptr;
    bool operator<(const Tuned& o) const {
      return std::pair(batch, len) < std::pair(o.batch, o.len);
    }
  };
  // Appends a bucket key's entry to its problem's list (unsorted); nullptr for another key.
  std::vector<Tuned>* index(const std::string& key, const Entry& entry);

  Metadata metadata_;
  std::map<std::string, Entry> entries_;
  // problem_key -> its entries sorted by (batch, len): the index of nearest().
  std::map<std::string, std::vector<Tuned>, std::less<>> by_problem_;
};

// The cache path: `explicit_path`, else $MLAKIT_TUNE_CACHE, else "" (no cache).
std::string cache_path(const std::string& explicit_path);

}  // namespace mlakit::tune
