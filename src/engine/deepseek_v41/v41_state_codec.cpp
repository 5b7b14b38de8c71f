#include "engine/deepseek_v41/v41_state_codec.h"

#include <xxhash.h>

#include <cstring>

#include "core/error.h"

namespace dsinfer::engine {
namespace {

namespace v41 = model::deepseek_v41;

constexpr char kMagic[8] = {'D', 'S', 'V', '4', '1', 'S', 'T', '\0'};
// 2: ratio-2 compressor inputs of the even positions only, ratio-1 none (version 1 had every position's).
constexpr uint32_t kVersion = 2;
// magic, version, kind, layout hash, index, payload length, payload checksum.
constexpr size_t kHeader = 8 + 4 + 4 + 8 + 8 + 8 + 8;

class Writer {
 public:
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  }
  template <class T>
  void array(const std::vector<T>& v) {
    put<uint64_t>(v.size());
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    out.insert(out.end(), p, p + v.size() * sizeof(T));
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  template <class T>
  T get() {
    T v;
    take(&v, sizeof v);
    return v;
  }
  template <class T>
  std::vector<T> array() {
    const uint64_t n = get<uint64_t>();
    DSINFER_CHECK(n <= (b_.size() - at_) / sizeof(T), "V4.1 state bytes: an array of ", n, " overruns the payload");
    std::vector<T> v(static_cast<size_t>(n));
    take(v.data(), v.size() * sizeof(T));
    return v;
  }
  // A count of items that each take at least `min_bytes`: bounded by what is left.
  uint64_t count(size_t min_bytes) {
    const uint64_t n = get<uint64_t>();
    DSINFER_CHECK(n <= (b_.size() - at_) / min_bytes, "V4.1 state bytes: a count of ", n, " overruns the payload");
    return n;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  void take(void* dst, size_t n) {
    DSINFER_CHECK(n <= b_.size() - at_, "V4.1 state bytes: truncated payload");
    if (n) std::memcpy(dst, b_.data() + at_, n);
    at_ += n;
  }
  std::span<const uint8_t> b_;
  size_t at_ = 0;
};

uint64_t layout_hash(std::string_view layout) { return XXH3_64bits(layout.data(), layout.size()); }

}  // namespace

std::vector<uint8_t> encode_v41_state(const v41::StateRange& r, V41StateKind kind, std::string_view layout,
                                      int64_t index) {
  Writer p;
  p.put<int64_t>(r.begin);
  p.put<int64_t>(r.end);
  p.array(r.ids);
  p.array(r.cid);
  p.put<uint64_t>(r.windows.size());
  for (const auto& w : r.windows) p.array(w);
  p.put<uint64_t>(r.sources.size());
  for (const auto& s : r.sources) {
    p.put<int64_t>(s.layer);
    p.put<int64_t>(s.ratio);
    p.array(s.u);
    p.array(s.g);
    p.array(s.ckv);
    p.array(s.ik);
  }
  p.put<uint64_t>(r.taps.size());
  for (const auto& t : r.taps) p.array(t);
  Writer h;
  h.out.assign(kMagic, kMagic + sizeof kMagic);
  h.put<uint32_t>(kVersion);
  h.put<uint32_t>(static_cast<uint32_t>(kind));
  h.put<uint64_t>(layout_hash(layout));
  h.put<int64_t>(index);
  h.put<uint64_t>(p.out.size());
  h.put<uint64_t>(XXH3_64bits(p.out.data(), p.out.size()));
  h.out.insert(h.out.end(), p.out.begin(), p.out.end());
  return std::move(h.out);
}

v41::StateRange decode_v41_state(std::span<const uint8_t> bytes, V41StateKind kind, std::string_view layout,
                                 int64_t index, const model::ModelConfig& config) {
  DSINFER_CHECK(bytes.size() >= kHeader, "V4.1 state bytes: ", bytes.size(), " bytes, shorter than the header");
  DSINFER_CHECK(std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0, "V4.1 state bytes: bad magic");
  Reader h(bytes.subspan(sizeof kMagic, kHeader - sizeof kMagic));
  const auto version = h.get<uint32_t>();
  DSINFER_CHECK(version == kVersion, "V4.1 state bytes: version ", version, ", this build reads ", kVersion,
                version < kVersion ? " (older bytes keep another state layout: recompute the state)" : "");
  const auto got_kind = h.get<uint32_t>();
  DSINFER_CHECK(got_kind == static_cast<uint32_t>(kind), "V4.1 state bytes: kind ", got_kind, ", expected ",
                static_cast<uint32_t>(kind));
  const auto layout_h = h.get<uint64_t>();
  const auto got_index = h.get<int64_t>();
  const auto length = h.get<uint64_t>();
  const auto checksum = h.get<uint64_t>();
  const std::span<const uint8_t> payload = bytes.subspan(kHeader);
  DSINFER_CHECK(length == payload.size(), "V4.1 state bytes: payload of ", payload.size(), " bytes, the header says ",
                length);
  DSINFER_CHECK(XXH3_64bits(payload.data(), payload.size()) == checksum, "V4.1 state bytes: checksum mismatch");
  DSINFER_CHECK(layout_h == layout_hash(layout), "V4.1 state bytes: made for another cache layout");
  DSINFER_CHECK(got_index == index, "V4.1 state bytes: block ", got_index, ", expected ", index);
  Reader p(payload);
  v41::StateRange r;
  r.begin = p.get<int64_t>();
  r.end = p.get<int64_t>();
  r.ids = p.array<int32_t>();
  r.cid = p.array<int64_t>();
  r.windows.resize(static_cast<size_t>(p.count(8)));
  for (auto& w : r.windows) w = p.array<float>();
  r.sources.resize(static_cast<size_t>(p.count(48)));
  for (auto& s : r.sources) {
    s.layer = p.get<int64_t>();
    s.ratio = p.get<int64_t>();
    s.u = p.array<float>();
    s.g = p.array<float>();
    s.ckv = p.array<float>();
    s.ik = p.array<float>();
  }
  r.taps.resize(static_cast<size_t>(p.count(8)));
  for (auto& t : r.taps) t = p.array<float>();
  DSINFER_CHECK(p.done(), "V4.1 state bytes: trailing bytes after the range");
  v41::check_state_range(config, r);
  return r;
}

}  // namespace dsinfer::engine
