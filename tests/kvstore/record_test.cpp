#include <gtest/gtest.h>

#include <cstring>

#include "kvstore/record.h"
#include "kvstore_test_util.h"

namespace dsinfer::kvstore {
namespace {

using testing::block_payload;
using testing::block_tokens;

constexpr uint64_t kKey = 0x0123456789abcdefull;

std::vector<uint8_t> sample(size_t payload_bytes = 1000) {
  return encode_record(kKey, block_tokens(kKey), block_payload(kKey, payload_bytes), TrafficClass::kAgent, 42);
}

TEST(KvRecord, RoundTrip) {
  const auto tokens = block_tokens(kKey);
  const auto payload = block_payload(kKey, 1000);
  const auto bytes = encode_record(kKey, tokens, payload, TrafficClass::kAgent, 42);
  ASSERT_EQ(bytes.size(), kRecordHeaderBytes + 128 * 4 + 1000);
  RecordView v;
  ASSERT_EQ(check_record(bytes, kKey, tokens, &v), RecordStatus::kOk);
  EXPECT_EQ(v.header.key, kKey);
  EXPECT_EQ(v.header.traffic_class, TrafficClass::kAgent);
  EXPECT_EQ(v.header.created_ns, 42);
  EXPECT_EQ(v.header.token_count, 128u);
  ASSERT_EQ(v.payload.size(), payload.size());
  EXPECT_EQ(std::memcmp(v.payload.data(), payload.data(), payload.size()), 0);
}

TEST(KvRecord, LayoutMatchesTheDocumentedBytes) {
  const auto bytes = sample(10);
  // "DSKV", version 1, class agent (0), then the key little-endian at offset 8.
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()), 4), "DSKV");
  EXPECT_EQ(bytes[4], 1);
  EXPECT_EQ(bytes[5], 0);
  EXPECT_EQ(bytes[6], 0);
  EXPECT_EQ(bytes[8], 0xef);
  EXPECT_EQ(bytes[15], 0x01);
  EXPECT_EQ(bytes[16], 128);  // token count
  EXPECT_EQ(bytes[24], 10);   // payload bytes
}

TEST(KvRecord, EmptyPayloadRoundTrips) {
  const auto bytes = encode_record(kKey, block_tokens(kKey), {}, TrafficClass::kChat, 0);
  RecordView v;
  ASSERT_EQ(check_record(bytes, kKey, block_tokens(kKey), &v), RecordStatus::kOk);
  EXPECT_TRUE(v.payload.empty());
}

TEST(KvRecord, EveryTruncationIsRejected) {
  const auto bytes = sample();
  for (size_t len : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, kRecordHeaderBytes + 128 * 4 - 1,
                     kRecordHeaderBytes + 128 * 4, bytes.size() - 1}) {
    RecordView v;
    EXPECT_EQ(parse_record({bytes.data(), len}, &v), RecordStatus::kTruncated) << "length " << len;
  }
  auto longer = bytes;
  longer.push_back(0);
  RecordView v;
  EXPECT_EQ(parse_record(longer, &v), RecordStatus::kTooLong);
}

TEST(KvRecord, EverySingleBitFlipIsRejected) {
  const auto bytes = sample(300);
  for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
    auto bad = bytes;
    bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    RecordView v;
    EXPECT_NE(parse_record(bad, &v), RecordStatus::kOk) << "bit " << bit;
  }
}

TEST(KvRecord, FlipsAreReportedByRegion) {
  const auto bytes = sample(300);
  auto flip = [&](size_t byte) {
    auto bad = bytes;
    bad[byte] ^= 0x10;
    RecordView v;
    return parse_record(bad, &v);
  };
  EXPECT_EQ(flip(0), RecordStatus::kBadMagic);
  EXPECT_EQ(flip(4), RecordStatus::kBadVersion);
  EXPECT_EQ(flip(7), RecordStatus::kBadHeader);                        // reserved byte
  EXPECT_EQ(flip(20), RecordStatus::kBadHeader);                       // reserved word
  EXPECT_EQ(flip(50), RecordStatus::kBadHeader);                       // parent key
  EXPECT_EQ(flip(40), RecordStatus::kBadHeader);                       // created time
  EXPECT_EQ(flip(kRecordHeaderBytes + 5), RecordStatus::kBadHeader);   // a token id
  EXPECT_EQ(flip(bytes.size() - 1), RecordStatus::kBadPayload);
  EXPECT_EQ(flip(kRecordHeaderBytes + 128 * 4), RecordStatus::kBadPayload);
}

TEST(KvRecord, HugeSizesAreRejectedBeforeAnyUse) {
  auto bad = sample();
  const uint32_t tokens = 0xffffffffu;
  std::memcpy(bad.data() + 16, &tokens, 4);
  RecordView v;
  EXPECT_EQ(parse_record(bad, &v), RecordStatus::kBadSize);
  bad = sample();
  const uint64_t payload = ~uint64_t{0} - 10;  // would wrap the size sum
  std::memcpy(bad.data() + 24, &payload, 8);
  EXPECT_EQ(parse_record(bad, &v), RecordStatus::kBadSize);
}

TEST(KvRecord, ForeignRecordsAreRejected) {
  const auto bytes = sample();
  RecordView v;
  EXPECT_EQ(check_record(bytes, kKey + 1, block_tokens(kKey), &v), RecordStatus::kWrongKey);
  auto other = block_tokens(kKey);
  other[127] += 1;
  EXPECT_EQ(check_record(bytes, kKey, other, &v), RecordStatus::kWrongTokens);
  other.pop_back();
  EXPECT_EQ(check_record(bytes, kKey, other, &v), RecordStatus::kWrongTokens);
  const auto with_parent = encode_record(kKey, block_tokens(kKey), {}, TrafficClass::kChat, 0, 777);
  EXPECT_EQ(check_record(with_parent, kKey, block_tokens(kKey), &v, 777), RecordStatus::kOk);
  EXPECT_EQ(v.header.parent_key, 777u);
  EXPECT_EQ(check_record(with_parent, kKey, block_tokens(kKey), &v, 778), RecordStatus::kWrongParent);
  EXPECT_EQ(check_record(with_parent, kKey, block_tokens(kKey), &v), RecordStatus::kOk) << "parent 0: not checked";
  const auto other_version = [&] {
    auto b = bytes;
    b[4] = 2;
    return b;
  }();
  EXPECT_EQ(check_record(other_version, kKey, block_tokens(kKey), &v), RecordStatus::kBadVersion);
}

}  // namespace
}  // namespace dsinfer::kvstore
