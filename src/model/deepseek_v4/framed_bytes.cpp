#include "model/deepseek_v4/framed_bytes.h"

#include <xxhash.h>

#include "core/error.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

FrameWriter::FrameWriter(uint64_t magic, uint32_t version) {
  pod(magic);
  pod(version);
  pod(uint32_t{0});
  pod(uint64_t{0});  // body length, set by finish()
}

void FrameWriter::raw(const void* p, size_t n) {
  const size_t at = out_.size();
  out_.resize(at + n);
  if (n > 0) std::memcpy(out_.data() + at, p, n);
}

void FrameWriter::str(const std::string& s) {
  pod<uint64_t>(s.size());
  raw(s.data(), s.size());
}

std::vector<uint8_t> FrameWriter::finish() {
  const uint64_t body = out_.size() - FrameReader::kHeaderBytes;
  std::memcpy(out_.data() + 16, &body, sizeof body);
  pod<uint64_t>(XXH3_64bits(out_.data(), out_.size()));
  return std::move(out_);
}

FrameReader::FrameReader(std::span<const uint8_t> bytes, uint64_t magic, uint32_t version, const char* what)
    : what_(what) {
  DSINFER_CHECK(bytes.size() >= kOverheadBytes, what, ": ", bytes.size(), " bytes are too few for a ", what,
                " record (at least ", kOverheadBytes, "): truncated or not a ", what);
  DSINFER_CHECK(load<uint64_t>(bytes.data()) == magic, what, ": wrong magic number: not a ", what);
  const auto got_version = load<uint32_t>(bytes.data() + 8);
  DSINFER_CHECK(got_version == version, what, ": format version ", got_version, ", this build reads version ",
                version);
  const auto body = load<uint64_t>(bytes.data() + 16);
  DSINFER_CHECK(body == bytes.size() - kOverheadBytes, what, ": the header announces ", body, " body bytes, the record has ",
                bytes.size() - kOverheadBytes, " (truncated or padded)");
  const size_t sum_at = bytes.size() - 8;
  DSINFER_CHECK(XXH3_64bits(bytes.data(), sum_at) == load<uint64_t>(bytes.data() + sum_at), what,
                ": checksum mismatch (corrupt data)");
  body_ = bytes.subspan(kHeaderBytes, body);
}

const uint8_t* FrameReader::take(size_t n) {
  DSINFER_CHECK(n <= remaining(), what_, ": a field of ", n, " bytes at body offset ", pos_, " runs past the end (",
                remaining(), " bytes left)");
  const uint8_t* p = body_.data() + pos_;
  pos_ += n;
  return p;
}

std::string FrameReader::str(size_t max_bytes) {
  const auto n = pod<uint64_t>();
  DSINFER_CHECK(n <= max_bytes, what_, ": a string of ", n, " bytes, more than the ", max_bytes, " allowed");
  const uint8_t* p = take(static_cast<size_t>(n));
  return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
}

void FrameReader::expect_done() const {
  DSINFER_CHECK(remaining() == 0, what_, ": ", remaining(), " trailing bytes after the last field");
}

}  // namespace dsinfer::model::deepseek_v4
