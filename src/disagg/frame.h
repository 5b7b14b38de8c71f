// The framing of a KV handoff message: every chunk of a payload travels as one UCX tagged message, a
// 48-byte header followed by the chunk's bytes. The header says where the chunk belongs and carries its
// XXH3-64, so a receiver places each chunk straight into the final buffer and checks it there.
// Layout (little-endian): README.md "Framing".
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace dsinfer::disagg {

constexpr uint32_t kFrameMagic = 0x484B5344;  // "DSKH"
constexpr uint16_t kFrameVersion = 1;
constexpr size_t kFrameHeaderBytes = 48;

enum class FrameKind : uint16_t {
  kData = 1,   // payload bytes
  kRkey = 2,   // a descriptor of registered memory to pull with an RMA get
  kDone = 3,   // the receiver has the payload: the sender may free it
  kHello = 4,  // a peer introduces itself (payload: its listener address)
  kControl = 5,
};

struct FrameHeader {
  FrameKind kind = FrameKind::kData;
  uint64_t transfer = 0;  // names the payload (e.g. the request id); < 2^56
  uint64_t total_bytes = 0;
  uint32_t chunk_index = 0;
  uint32_t chunk_count = 1;
  uint64_t chunk_offset = 0;
  uint64_t chunk_xxh3 = 0;
};

void encode_frame_header(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]);
// Parses and checks the magic, version and kind; fails (core::Error) naming what is wrong.
FrameHeader decode_frame_header(std::span<const uint8_t> bytes);

// The UCX tag of a message: kind in the top 8 bits, transfer id below.
uint64_t frame_tag(FrameKind kind, uint64_t transfer);

uint64_t payload_xxh3(std::span<const uint8_t> bytes);

}  // namespace dsinfer::disagg
