// Reading a libFuzzer input as a stream of small decisions: each call takes the next bytes (zeros
// once the input is used up), so that every input, of any length, is a valid run of the target.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace mlakit_fuzz {

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  template <typename T>
  T raw() {
    T value{};
    const size_t n = std::min(sizeof(T), size_ - pos_);
    std::memcpy(&value, data_ + pos_, n);
    pos_ += n;
    return value;
  }
  // One of [lo, hi].
  int64_t in(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(raw<uint32_t>() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool flag() { return raw<uint8_t>() & 1; }
  // Mostly one of `common` (valid choices), sometimes any 32-bit value.
  template <size_t N>
  int32_t pick(const int32_t (&common)[N]) {
    const uint8_t c = raw<uint8_t>();
    return c < 224 ? common[c % N] : raw<int32_t>();
  }
  // Whatever is left.
  std::string rest() {
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_ - pos_);
    pos_ = size_;
    return s;
  }
  size_t left() const { return size_ - pos_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace mlakit_fuzz
