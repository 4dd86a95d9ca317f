#include "tune/cache.h"

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string_view>

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

// A value from the file (or its path) for a message: at most `max` bytes, control characters
// replaced, and the full size when it was longer (a 100 MB string must not land in notes()).
std::string excerpt(std::string_view text, size_t max = 64) {
  std::string s(text.substr(0, max));
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  if (text.size() > max) s += str_cat("... (", text.size(), " bytes)");
  return s;
}

// A field that is missing, of the wrong type or out of range; parse() turns it into the reason.
struct BadField {
  std::string what;
};

[[noreturn]] void bad(std::string_view field, std::string_view expected, const json& given) {
  std::string shown;
  if (given.is_string()) {
    shown = str_cat("\"", excerpt(given.get_ref<const std::string&>()), "\"");
  } else if (given.is_number() || given.is_boolean() || given.is_null()) {
    shown = given.dump();
  } else {
    shown = str_cat("a JSON ", given.type_name());
  }
  throw BadField{str_cat(field, ": expected ", expected, ", given ", shown)};
}

const json& member(const json& object, std::string_view field, std::string_view path) {
  const auto it = object.find(field);
  if (it == object.end()) throw BadField{str_cat(path, field, ": missing")};
  return *it;
}

// An integer in [lo, hi]: JSON integers only, so 1e300 or 2.5 are refused, never converted.
int get_int(const json& object, std::string_view field, std::string_view path, int64_t lo,
            int64_t hi) {
  const json& v = member(object, field, path);
  const std::string name = str_cat(path, field);
  const std::string expected = str_cat("an integer in ", lo, "..", hi);
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(hi)) bad(name, expected, v);
  } else if (!v.is_number_integer()) {
    bad(name, expected, v);
  }
  const int64_t x =
      v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
  if (x < lo || x > hi) bad(name, expected, v);
  return static_cast<int>(x);
}

double get_time(const json& object, std::string_view field, std::string_view path) {
  const json& v = member(object, field, path);
  if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>())) {
    bad(str_cat(path, field), "a time in microseconds >= 0", v);
  }
  return v.get<double>();
}

// A string of 1..max_size bytes (0..max_size when `may_be_empty`).
std::string get_string(const json& object, std::string_view field, std::string_view path,
                       size_t max_size, bool may_be_empty = false) {
  const json& v = member(object, field, path);
  if (!v.is_string() || v.get_ref<const std::string&>().size() > max_size ||
      (!may_be_empty && v.get_ref<const std::string&>().empty())) {
    bad(str_cat(path, field),
        str_cat("a string of ", may_be_empty ? 0 : 1, "..", max_size, " bytes"), v);
  }
  return v.get<std::string>();
}

// The batch and length buckets of a bucket key ("<problem>|b<batch>|L<len>"), or false when the
// key is not one (buckets as bucket.h makes them: canonical decimal, positive, rounded).
bool parse_key(std::string_view key, std::string_view* problem, int* batch, int* len) {
  const size_t bar = key.find('|');
  if (bar == std::string_view::npos || bar == 0) return false;
  *problem = key.substr(0, bar);
  const std::string_view rest = key.substr(bar + 1);
  if (rest.size() < 4 || rest[0] != 'b') return false;
  const char* end = rest.data() + rest.size();
  const auto [b_end, b_err] = std::from_chars(rest.data() + 1, end, *batch);
  if (b_err != std::errc() || end - b_end < 3 || b_end[0] != '|' || b_end[1] != 'L') return false;
  const auto [l_end, l_err] = std::from_chars(b_end + 2, end, *len);
  if (l_err != std::errc() || l_end != end) return false;
  // Within the ranges of validate(Problem) first: batch_bucket(INT32_MAX) would overflow.
  return *batch >= 1 && *batch <= kMaxBatch && batch_bucket(*batch) == *batch && *len >= 1 &&
         *len <= kMaxSeqLen && len_bucket(*len) == *len &&
         str_cat("b", *batch, "|L", *len) == rest;  // no leading zeros
}

// Parses a cache document; returns false (with the reason) on any structural problem or value
// outside its field's range.
bool parse(const std::string& text, Metadata* meta, std::map<std::string, Entry>* entries,
           std::string* why) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    *why = "not valid JSON";
    return false;
  }
  try {
    if (!doc.is_object()) bad("the document", "a JSON object", doc);
    const json& format = member(doc, "format", "");
    if (!format.is_number_integer() || format.get<int64_t>() != kFormatVersion) {
      bad("format", str_cat(kFormatVersion), format);
    }
    const json& m = member(doc, "metadata", "");
    if (!m.is_object()) bad("metadata", "a JSON object", m);
    meta->gpu = get_string(m, "gpu", "metadata.", 256);
    meta->sm_count = get_int(m, "sm_count", "metadata.", 0, INT32_MAX);
    meta->driver_version = get_int(m, "driver_version", "metadata.", 0, INT32_MAX);
    meta->runtime_version = get_int(m, "runtime_version", "metadata.", 0, INT32_MAX);
    meta->library_version = get_string(m, "library_version", "metadata.", 64);
    const json& all = member(doc, "entries", "");
    if (!all.is_object()) bad("entries", "a JSON object", all);
    for (const auto& item : all.items()) {
      const std::string& key = item.key();
      const json& e = item.value();  // not a structured binding: lambdas below capture it
      std::string_view problem;
      int batch = 0, len = 0;
      const std::string path = str_cat("entries[\"", excerpt(key), "\"]");
      if (!parse_key(key, &problem, &batch, &len)) {
        throw BadField{str_cat(path,
                               ": expected a bucket key <problem>|b<batch bucket>|L<length "
                               "bucket> (batch 1, 2, 4, ..., 256, 512, 768, ...; length a "
                               "power of two)")};
      }
      if (!e.is_object()) bad(path, "a JSON object", e);
      const std::string at = path + ".";
      // Optional fields (files of the first format 2 tuners lack ragged and runner-up ones).
      auto optional_time = [&](const char* field) {
        return e.contains(field) ? get_time(e, field, at) : 0.0;
      };
      Entry entry{.backend = get_string(e, "backend", at, 64),
                  .tactic = get_int(e, "tactic", at, 0, INT32_MAX),
                  .time_us = get_time(e, "time_us", at),
                  .ragged_us = optional_time("ragged_us"),
                  .runner_up = e.contains("runner_up")
                                   ? get_string(e, "runner_up", at, 64, /*may_be_empty=*/true)
                                   : std::string(),
                  .runner_up_tactic = e.contains("runner_up_tactic")
                                          ? get_int(e, "runner_up_tactic", at, 0, INT32_MAX)
                                          : 0,
                  .runner_up_us = optional_time("runner_up_us"),
                  .runner_up_ragged_us = optional_time("runner_up_ragged_us")};
      (*entries)[key] = std::move(entry);
    }
  } catch (const BadField& e) {
    *why = e.what;
    return false;
  }
  return true;
}

// The deepest nesting of arrays and objects in `text`, counted up to `limit` + 1 (strings
// skipped). The parser keeps a tree node per level, so 16 MiB of '[' would take gigabytes; a
// cache document is three levels deep.
int nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size() && deepest <= limit; ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

enum class Read { kOk, kMissing, kRefused };

// Reads the cache file at `path` into `text`: a regular file of at most kMaxFileBytes. kMissing
// when there is none (not an error: nothing was tuned yet); kRefused, with the reason, for
// anything else. Opened without blocking: a FIFO would otherwise wait for a writer.
Read read_file(const std::string& path, std::string* text, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) return Read::kMissing;
    *why = str_cat("cannot be read (", std::strerror(errno), ")");
    return Read::kRefused;
  }
  struct stat st {};
  int error = 0;
  if (::fstat(fd, &st) != 0) {
    error = errno;
  } else if (!S_ISREG(st.st_mode)) {
    *why = "not a regular file";
  } else if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes) {
    *why = str_cat("larger than ", kMaxFileBytes >> 20, " MiB (", st.st_size, " bytes)");
  } else {
    // One byte more than the file holds: a file that grows while it is read is refused.
    text->resize(static_cast<size_t>(st.st_size) + 1);
    size_t size = 0;
    while (size < text->size() && error == 0) {
      const ssize_t got = ::read(fd, text->data() + size, text->size() - size);
      if (got == 0) break;
      if (got < 0 && errno != EINTR) error = errno;
      if (got > 0) size += static_cast<size_t>(got);
    }
    if (error == 0 && size > static_cast<size_t>(st.st_size)) *why = "changed while it was read";
    text->resize(size);
  }
  ::close(fd);
  if (error != 0) *why = str_cat("cannot be read (", std::strerror(error), ")");
  return why->empty() ? Read::kOk : Read::kRefused;
}

// Reads and parses the cache file at `path`: kOk with its metadata and entries, kMissing, or
// kRefused with the reason.
Read read_cache(const std::string& path, Metadata* meta, std::map<std::string, Entry>* entries,
                std::string* why) {
  std::string text;
  const Read read = read_file(path, &text, why);
  if (read != Read::kOk) return read;
  constexpr int kMaxDepth = 16;
  if (nesting_depth(text, kMaxDepth) > kMaxDepth) {
    *why = str_cat("nested deeper than ", kMaxDepth, " levels");
    return Read::kRefused;
  }
  return parse(text, meta, entries, why) ? Read::kOk : Read::kRefused;
}

std::string describe(const Metadata& m) {
  return str_cat(excerpt(m.gpu), ", ", m.sm_count, " SMs, driver ", m.driver_version, ", runtime ",
                 m.runtime_version, ", mlakit ", excerpt(m.library_version));
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
  if (path.empty()) return cache;
  Metadata found;
  std::map<std::string, Entry> entries;
  std::string why;
  const Read read = read_cache(path, &found, &entries, &why);
  if (read == Read::kMissing) return cache;  // no file yet: nothing to trust
  if (read == Read::kOk && !(found == metadata)) {
    why = str_cat("it was made for ", describe(found), ", this machine is ", describe(metadata));
  }
  if (!why.empty()) {
    if (warning) *warning = str_cat("tune cache ", excerpt(path, 256), " ignored: ", why);
    return cache;
  }
  cache.entries_ = std::move(entries);
  for (const auto& [key, entry] : cache.entries_) cache.index(key, entry);
  for (auto& [problem, tuned] : cache.by_problem_) std::sort(tuned.begin(), tuned.end());
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
  std::string why;
  Metadata found;
  if (read_cache(path, &found, &merged, &why) != Read::kOk || !(found == metadata_)) {
    merged.clear();  // no file, or a bad or foreign one: replaced by this machine's results
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

void Cache::put(const std::string& key, const Entry& entry) {
  const auto [it, inserted] = entries_.insert_or_assign(key, entry);
  if (!inserted) return;
  std::vector<Tuned>* tuned = index(it->first, it->second);
  if (tuned != nullptr) {  // the new entry, appended, to its place
    std::rotate(std::upper_bound(tuned->begin(), tuned->end() - 1, tuned->back()), tuned->end() - 1,
                tuned->end());
  }
}

std::vector<Cache::Tuned>* Cache::index(const std::string& key, const Entry& entry) {
  std::string_view problem;
  int batch = 0, len = 0;
  if (!parse_key(key, &problem, &batch, &len)) return nullptr;
  auto it = by_problem_.find(problem);
  if (it == by_problem_.end()) {
    it = by_problem_.emplace(std::string(problem), std::vector<Tuned>{}).first;
  }
  it->second.push_back({.batch = batch,
                        .len = len,
                        .log_batch = std::log2(batch),
                        .log_len = std::log2(len),
                        .key = &key,
                        .entry = &entry});
  return &it->second;
}

const Entry* Cache::nearest(const Problem& problem, int batch_bkt, int len_bkt,
                            std::string* key) const {
  const auto it = by_problem_.find(problem_key(problem));
  if (it == by_problem_.end()) return nullptr;
  const std::vector<Tuned>& tuned = it->second;  // sorted by (batch, len)
  const double log_b = std::log2(batch_bkt), log_l = std::log2(len_bkt);
  const Tuned* best = nullptr;
  double best_distance = 0;
  auto consider = [&](const Tuned& t) {
    const double distance = std::fabs(t.log_batch - log_b) + std::fabs(t.log_len - log_l);
    if (best == nullptr || distance < best_distance || (distance == best_distance && t < *best)) {
      best = &t;
      best_distance = distance;
    }
  };
  // The entries of one batch bucket, [first, last): only those of the nearest lengths can win.
  using Iter = std::vector<Tuned>::const_iterator;
  auto consider_batch = [&](Iter first, Iter last) {
    const Iter at =
        std::lower_bound(first, last, len_bkt, [](const Tuned& t, int len) { return t.len < len; });
    if (at != last) consider(*at);
    if (at != first) consider(*(at - 1));
  };
  auto by_batch = [](const Tuned& t, int batch) { return t.batch < batch; };
  // Batch buckets outward from batch_bkt, on each side until the batch distance alone exceeds
  // the best distance found: O(batch buckets tuned x log), whatever the number of lengths.
  const Iter split = std::lower_bound(tuned.begin(), tuned.end(), batch_bkt, by_batch);
  for (Iter first = split; first != tuned.end();) {
    if (best != nullptr && first->log_batch - log_b > best_distance) break;
    const Iter last = std::lower_bound(first, tuned.end(), first->batch + 1, by_batch);
    consider_batch(first, last);
    first = last;
  }
  for (Iter last = split; last != tuned.begin();) {
    if (best != nullptr && log_b - (last - 1)->log_batch > best_distance) break;
    const Iter first = std::lower_bound(tuned.begin(), last, (last - 1)->batch, by_batch);
    consider_batch(first, last);
    last = first;
  }
  if (best != nullptr && key != nullptr) *key = *best->key;
  return best != nullptr ? best->entry : nullptr;
}

}  // namespace mlakit::tune
