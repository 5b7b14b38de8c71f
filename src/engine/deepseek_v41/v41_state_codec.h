// The bytes of a V4.1 state range (model/deepseek_v41/state_range.h) for the KV store and sequence
// hand-over: a checked frame (magic, version, kind, layout hash, block index, payload length, XXH3-64
// of the payload) around the range's arrays. The checksum is verified before anything is parsed; the
// parsed range is then checked against the model's config. Host byte order (little-endian machines).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/deepseek_v41/state_range.h"

namespace dsinfer::engine {

enum class V41StateKind : uint32_t { kBlock = 1, kSequence = 2 };

// layout: the runner's cache_layout (a range is only valid for the same layout); index: the block
// index (-1 for a sequence).
std::vector<uint8_t> encode_v41_state(const model::deepseek_v41::StateRange& range, V41StateKind kind,
                                      std::string_view layout, int64_t index);

// Throws core::Error on anything but the bytes encode_v41_state made for this kind, layout and index,
// of a range that fits the config.
model::deepseek_v41::StateRange decode_v41_state(std::span<const uint8_t> bytes, V41StateKind kind,
                                                 std::string_view layout, int64_t index,
                                                 const model::ModelConfig& config);

}  // namespace dsinfer::engine
