// libFuzzer target for the readers of bytes that come back from disk or the network: window snapshots
// (WindowSnapshot::from_bytes + SequenceState::restore) and compressed blocks (CompressedBlock::
// from_bytes), on the shape of the TINY config (no weights needed). Arbitrary bytes must be restored
// or refused with a core::Error of kind invalid input, never a crash or a huge allocation. Random bytes
// never pass the checksum, so the first input byte picks how much of the frame the harness makes valid:
//   0  the bytes as they are (frame checks);
//   1  the rest as the body of a snapshot with a valid frame (every field behind the checksum);
//   2  the same, with the true layout string and layer count spliced in after the two lengths;
//   3  the rest as a block's entries, behind a valid frame with the true index and layout;
//   4  the rest as a block's body with a valid frame.
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "model/deepseek_v4/sequence_state.h"
#include "model/deepseek_v4/shape.h"

using namespace dsinfer;
using namespace dsinfer::model::deepseek_v4;

namespace {

#define FUZZ_CHECK(cond)                                                    \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "state_bytes_fuzz: check failed: %s\n", #cond); \
      __builtin_trap();                                                     \
    }                                                                       \
  } while (0)

constexpr uint64_t kSnapshotMagic = 0x31504e5334565344ull;  // "DSV4SNP1" (sequence_state.cpp)
constexpr uint64_t kBlockMagic = 0x314b4c4234565344ull;     // "DSV4BLK1" (compressed_block.cpp)
constexpr int64_t kAttachedBlocks = 3;

std::shared_ptr<const ModelShape> g_shape;
std::vector<BlockRef> g_blocks;  // zero blocks 0..2, so snapshots up to 3 blocks deep can restore

std::vector<uint8_t> frame(uint64_t magic, std::span<const uint8_t> body) {
  std::vector<uint8_t> out(24);
  const uint32_t version = 1, zero = 0;
  const uint64_t n = body.size();
  std::memcpy(out.data(), &magic, 8);
  std::memcpy(out.data() + 8, &version, 4);
  std::memcpy(out.data() + 12, &zero, 4);
  std::memcpy(out.data() + 16, &n, 8);
  out.insert(out.end(), body.begin(), body.end());
  const uint64_t sum = XXH3_64bits(out.data(), out.size());
  out.resize(out.size() + 8);
  std::memcpy(out.data() + out.size() - 8, &sum, 8);
  return out;
}

template <typename T>
void append(std::vector<uint8_t>& v, const T& x) {
  const auto* p = reinterpret_cast<const uint8_t*>(&x);
  v.insert(v.end(), p, p + sizeof(T));
}

void expect_invalid_input(const core::Error& e) { FUZZ_CHECK(e.kind() == core::ErrorKind::kInvalidInput); }

void restore(std::span<const uint8_t> bytes) {
  try {
    const WindowSnapshot snap = WindowSnapshot::from_bytes(bytes);
    SequenceState st(g_shape);
    st.attach_prefix(g_blocks);
    st.restore(snap);
    FUZZ_CHECK(st.length() == snap.position() && !st.needs_window_state());
  } catch (const core::Error& e) {
    expect_invalid_input(e);
  }
}

void block(std::span<const uint8_t> bytes, int64_t index) {
  try {
    const BlockRef b = CompressedBlock::from_bytes(g_shape->blocks, index, bytes);
    FUZZ_CHECK(b->index() == index && b->bytes().size() == g_shape->blocks->bytes());
  } catch (const core::Error& e) {
    expect_invalid_input(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::ifstream in(std::string(DSINFER_SOURCE_DIR) + "/configs/tiny.json");
  std::stringstream text;
  text << in.rdbuf();
  const auto config = model::ModelConfig::parse(text.str(), "tiny.json");
  g_shape = std::make_shared<const ModelShape>(ModelShape::build(config, Numerics{}, 7));
  for (int64_t i = 0; i < kAttachedBlocks; ++i) g_blocks.push_back(std::make_shared<CompressedBlock>(g_shape->blocks, i));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  const std::string& desc = g_shape->blocks->describe();
  switch (data[0] % 5) {
    case 0:
      restore(rest);
      block(rest, 0);
      break;
    case 1:
      restore(frame(kSnapshotMagic, rest));
      break;
    case 2: {
      std::vector<uint8_t> body(rest.begin(), rest.begin() + std::min<size_t>(16, rest.size()));
      append<uint64_t>(body, desc.size());
      body.insert(body.end(), desc.begin(), desc.end());
      append<int64_t>(body, static_cast<int64_t>(g_shape->layers.size()));
      if (rest.size() > 16) body.insert(body.end(), rest.begin() + 16, rest.end());
      restore(frame(kSnapshotMagic, body));
      break;
    }
    case 3: {
      std::vector<uint8_t> body;
      append<int64_t>(body, 1);
      append<uint64_t>(body, desc.size());
      body.insert(body.end(), desc.begin(), desc.end());
      append<uint64_t>(body, rest.size());
      body.insert(body.end(), rest.begin(), rest.end());
      block(frame(kBlockMagic, body), 1);
      break;
    }
    default:
      block(frame(kBlockMagic, rest), 0);
      break;
  }
  return 0;
}
