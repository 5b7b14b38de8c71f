#include "disagg/frame.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace dsinfer::disagg {
namespace {

TEST(Frame, HeaderRoundTripsAndHasTheDocumentedLayout) {
  FrameHeader h;
  h.kind = FrameKind::kRkey;
  h.transfer = 0x0102030405060708;
  h.total_bytes = 10 << 20;
  h.chunk_index = 2;
  h.chunk_count = 3;
  h.chunk_offset = 8 << 20;
  h.chunk_xxh3 = 0xA1B2C3D4E5F60718;
  uint8_t bytes[kFrameHeaderBytes];
  encode_frame_header(h, bytes);
  // README.md "Framing": magic "DSKH", version 1, kind 2, then the transfer id little-endian.
  EXPECT_EQ(std::string(reinterpret_cast<char*>(bytes), 4), "DSKH");
  EXPECT_EQ(bytes[4], 1);
  EXPECT_EQ(bytes[6], 2);
  EXPECT_EQ(bytes[8], 0x08);
  EXPECT_EQ(bytes[15], 0x01);
  EXPECT_EQ(bytes[24], 2);  // chunk index
  EXPECT_EQ(bytes[28], 3);  // chunk count
  const FrameHeader back = decode_frame_header(bytes);
  EXPECT_EQ(back.kind, FrameKind::kRkey);
  EXPECT_EQ(back.transfer, h.transfer);
  EXPECT_EQ(back.total_bytes, h.total_bytes);
  EXPECT_EQ(back.chunk_index, 2u);
  EXPECT_EQ(back.chunk_count, 3u);
  EXPECT_EQ(back.chunk_offset, h.chunk_offset);
  EXPECT_EQ(back.chunk_xxh3, h.chunk_xxh3);
}

TEST(Frame, RejectsDamagedHeaders) {
  FrameHeader h;
  h.total_bytes = 100;
  uint8_t good[kFrameHeaderBytes];
  encode_frame_header(h, good);
  auto damaged = [&](size_t at, uint8_t value) {
    uint8_t b[kFrameHeaderBytes];
    std::copy(good, good + kFrameHeaderBytes, b);
    b[at] = value;
    return decode_frame_header(b);
  };
  EXPECT_NO_THROW(decode_frame_header(good));
  EXPECT_THROW(damaged(0, 'X'), core::Error);   // magic
  EXPECT_THROW(damaged(4, 9), core::Error);     // version
  EXPECT_THROW(damaged(6, 77), core::Error);    // kind
  EXPECT_THROW(damaged(24, 1), core::Error);    // chunk 1 of 1
  EXPECT_THROW(damaged(28, 0), core::Error);    // 0 chunks
  EXPECT_THROW(damaged(32, 101), core::Error);  // offset past the payload
  EXPECT_THROW(decode_frame_header(std::span<const uint8_t>(good, 47)), core::Error);
}

TEST(Frame, TagsSeparateKindsAndTransfers) {
  EXPECT_EQ(frame_tag(FrameKind::kData, 5), (uint64_t{1} << 56) | 5);
  EXPECT_NE(frame_tag(FrameKind::kData, 5), frame_tag(FrameKind::kDone, 5));
  EXPECT_THROW(frame_tag(FrameKind::kData, uint64_t{1} << 56), core::Error);
}

TEST(Frame, Xxh3OfKnownInput) {
  // XXH3-64 of the empty input with seed 0, from the xxHash specification's test vectors.
  EXPECT_EQ(payload_xxh3({}), 0x2D06800538D394C2ull);
}

}  // namespace
}  // namespace dsinfer::disagg
