// Byte records that leave the process and may come back from disk or the network (window snapshots,
// compressed blocks): a frame of magic, format version and body length around the body, closed by an
// XXH3-64 checksum of everything before it. The reader verifies the frame before any field is read
// and bounds every read by what is left (no size arithmetic that can wrap), so corrupt, truncated or
// foreign bytes are a core::Error of kind invalid input, never a crash or a huge allocation.
//
//   [magic u64][version u32][0 u32][body length u64][body ...][XXH3-64 of all previous bytes u64]
//
// Integers are in host byte order: records are exchanged between processes of the same build.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace dsinfer::model::deepseek_v4 {

class FrameWriter {
 public:
  FrameWriter(uint64_t magic, uint32_t version);
  template <typename T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    raw(&v, sizeof(T));
  }
  void raw(const void* p, size_t n);
  void str(const std::string& s);
  // The finished record; the writer is empty afterwards.
  std::vector<uint8_t> finish();

 private:
  std::vector<uint8_t> out_;
};

class FrameReader {
 public:
  static constexpr size_t kHeaderBytes = 24;
  static constexpr size_t kOverheadBytes = kHeaderBytes + 8;

  // Verifies size, magic, version, body length and checksum; `what` names the record in errors.
  FrameReader(std::span<const uint8_t> bytes, uint64_t magic, uint32_t version, const char* what);

  template <typename T>
  T pod() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  const uint8_t* take(size_t n);
  // A length-prefixed string of at most max_bytes.
  std::string str(size_t max_bytes);
  size_t remaining() const { return body_.size() - pos_; }
  // Fails unless the whole body was read.
  void expect_done() const;
  const char* what() const { return what_; }

 private:
  std::span<const uint8_t> body_;
  size_t pos_ = 0;
  const char* what_;
};

}  // namespace dsinfer::model::deepseek_v4
