#include "disagg/sequence_handoff.h"

#include <bit>
#include <cstring>

#include "disagg/little_endian.h"
#include "core/error.h"

namespace dsinfer::disagg {
namespace {

namespace v4 = model::deepseek_v4;

static_assert(std::endian::native == std::endian::little, "the hidden state travels as little-endian floats");

constexpr uint32_t kMagic = 0x51534B44;  // "DKSQ"
constexpr uint32_t kVersion = 1;

void put_bytes(std::vector<uint8_t>& out, std::span<const uint8_t> bytes) {
  put_u64(out, bytes.size());
  out.insert(out.end(), bytes.begin(), bytes.end());
}

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  uint64_t u64(const char* what) {
    DSINFER_CHECK(pos_ + 8 <= in_.size(), "sequence handoff: truncated at ", what);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
    pos_ += 8;
    return v;
  }
  std::span<const uint8_t> bytes(const char* what) {
    const uint64_t n = u64(what);
    DSINFER_CHECK(n <= in_.size() - pos_, "sequence handoff: ", what, " of ", n, " bytes runs past the end");
    const auto out = in_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<uint8_t> export_sequence(const v4::SequenceState& state, std::span<const float> last_hidden) {
  DSINFER_CHECK(!state.needs_window_state(), "sequence handoff: the state has attached blocks and no window state");
  const v4::WindowSnapshot snapshot = state.snapshot();
  std::vector<uint8_t> out;
  put_u64(out, (uint64_t{kVersion} << 32) | kMagic);
  put_u64(out, static_cast<uint64_t>(state.length()));
  // Only the blocks below the snapshot's position are needed; a state whose blocks run further (after a
  // rollback) keeps them, restore() drops them.
  const auto& blocks = state.blocks();
  const size_t needed = std::min<size_t>(blocks.size(), static_cast<size_t>(state.length() / state.block_tokens()));
  put_u64(out, needed);
  for (size_t i = 0; i < needed; ++i) put_bytes(out, blocks[i]->serialize());
  put_bytes(out, snapshot.bytes());
  put_bytes(out, {reinterpret_cast<const uint8_t*>(last_hidden.data()), last_hidden.size_bytes()});
  return out;
}

ImportedSequence import_sequence(const v4::Model& model, std::span<const uint8_t> bytes) {
  Reader r(bytes);
  const uint64_t head = r.u64("header");
  DSINFER_CHECK((head & 0xFFFFFFFF) == kMagic, "sequence handoff: bad magic");
  DSINFER_CHECK((head >> 32) == kVersion, "sequence handoff: version ", head >> 32, ", expected ", kVersion);
  const uint64_t length = r.u64("length");
  const uint64_t count = r.u64("block count");
  const int64_t block_tokens = model.shape().block_tokens;
  DSINFER_CHECK(length < (uint64_t{1} << 40) && count == length / static_cast<uint64_t>(block_tokens),
                "sequence handoff: ", count, " blocks for a length of ", length, " (", block_tokens,
                " positions per block)");
  std::vector<v4::BlockRef> blocks;
  blocks.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    blocks.push_back(v4::CompressedBlock::from_bytes(model.block_layout(), static_cast<int64_t>(i), r.bytes("block")));
  }
  const v4::WindowSnapshot snapshot = v4::WindowSnapshot::from_bytes(r.bytes("window snapshot"));
  const auto hidden = r.bytes("last hidden state");
  DSINFER_CHECK(r.done(), "sequence handoff: trailing bytes");
  const auto& shape = model.shape();
  const size_t hidden_floats = static_cast<size_t>(shape.config.hc_mult * shape.config.hidden_size);
  DSINFER_CHECK(hidden.empty() || hidden.size() == hidden_floats * sizeof(float), "sequence handoff: last hidden state of ",
                hidden.size(), " bytes, this model's is ", hidden_floats * sizeof(float));
  DSINFER_CHECK(snapshot.position() == static_cast<int64_t>(length), "sequence handoff: snapshot at ",
                snapshot.position(), ", state length ", length);
  ImportedSequence out;
  out.state = model.new_sequence();
  if (!blocks.empty()) out.state->attach_prefix(blocks);
  out.state->restore(snapshot);
  out.last_hidden.resize(hidden.size() / sizeof(float));
  if (!hidden.empty()) std::memcpy(out.last_hidden.data(), hidden.data(), hidden.size());
  return out;
}

}  // namespace dsinfer::disagg
