#include "disagg/frame.h"

#include <xxhash.h>

#include <cstring>

#include "core/error.h"

namespace dsinfer::disagg {
namespace {

template <typename T>
void put(uint8_t* out, size_t offset, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[offset + i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
}

template <typename T>
T get(const uint8_t* in, size_t offset) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(in[offset + i]) << (8 * i);
  return static_cast<T>(v);
}

}  // namespace

void encode_frame_header(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]) {
  std::memset(out, 0, kFrameHeaderBytes);
  put<uint32_t>(out, 0, kFrameMagic);
  put<uint16_t>(out, 4, kFrameVersion);
  put<uint16_t>(out, 6, static_cast<uint16_t>(h.kind));
  put<uint64_t>(out, 8, h.transfer);
  put<uint64_t>(out, 16, h.total_bytes);
  put<uint32_t>(out, 24, h.chunk_index);
  put<uint32_t>(out, 28, h.chunk_count);
  put<uint64_t>(out, 32, h.chunk_offset);
  put<uint64_t>(out, 40, h.chunk_xxh3);
}

FrameHeader decode_frame_header(std::span<const uint8_t> bytes) {
  DSINFER_CHECK(bytes.size() >= kFrameHeaderBytes, "KV handoff frame: ", bytes.size(), " bytes, shorter than a header");
  const uint8_t* in = bytes.data();
  DSINFER_CHECK(get<uint32_t>(in, 0) == kFrameMagic, "KV handoff frame: bad magic");
  DSINFER_CHECK(get<uint16_t>(in, 4) == kFrameVersion, "KV handoff frame: version ", get<uint16_t>(in, 4),
                ", expected ", kFrameVersion);
  FrameHeader h;
  const auto kind = get<uint16_t>(in, 6);
  DSINFER_CHECK(kind >= 1 && kind <= 5, "KV handoff frame: unknown kind ", kind);
  h.kind = static_cast<FrameKind>(kind);
  h.transfer = get<uint64_t>(in, 8);
  h.total_bytes = get<uint64_t>(in, 16);
  h.chunk_index = get<uint32_t>(in, 24);
  h.chunk_count = get<uint32_t>(in, 28);
  h.chunk_offset = get<uint64_t>(in, 32);
  h.chunk_xxh3 = get<uint64_t>(in, 40);
  DSINFER_CHECK(h.chunk_count >= 1 && h.chunk_index < h.chunk_count && h.chunk_offset <= h.total_bytes,
                "KV handoff frame: chunk ", h.chunk_index, " of ", h.chunk_count, " at ", h.chunk_offset,
                " does not fit a payload of ", h.total_bytes, " bytes");
  return h;
}

uint64_t frame_tag(FrameKind kind, uint64_t transfer) {
  DSINFER_CHECK(transfer < (uint64_t{1} << 56), "KV handoff: transfer id ", transfer, " needs more than 56 bits");
  return (static_cast<uint64_t>(kind) << 56) | transfer;
}

uint64_t payload_xxh3(std::span<const uint8_t> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

}  // namespace dsinfer::disagg
