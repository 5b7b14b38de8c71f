// The on-disk record: one full block of compressed KV (+ indexer keys) as opaque payload bytes, with
// everything a reader needs to reject a record that is not exactly the one it asked for. The format is
// documented byte by byte in README.md; every multi-byte field is little-endian.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstore/config.h"

namespace dsinfer::kvstore {

constexpr uint32_t kRecordMagic = 0x564B5344;  // the bytes "DSKV"
constexpr uint16_t kRecordVersion = 1;
constexpr size_t kRecordHeaderBytes = 64;
// Bounds a reader enforces before it allocates anything: a block is 128 tokens today.
constexpr uint32_t kMaxRecordTokens = 1u << 16;
constexpr uint64_t kMaxRecordPayloadBytes = uint64_t{1} << 32;

struct RecordHeader {
  uint32_t magic = kRecordMagic;
  uint16_t version = kRecordVersion;
  TrafficClass traffic_class = TrafficClass::kChat;
  uint64_t key = 0;
  uint32_t token_count = 0;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;
  int64_t created_ns = 0;
  uint64_t parent_key = 0;  // the key of the block before (the chain's root seed for the first); 0: not given
  uint64_t header_checksum = 0;
};

enum class RecordStatus {
  kOk,
  kTruncated,           // shorter than its header says, or shorter than a header
  kTooLong,             // bytes after the payload
  kBadMagic,
  kBadVersion,
  kBadHeader,           // header checksum (covers the token ids too), or a reserved field not zero
  kBadSize,             // token count or payload size beyond the limits
  kBadPayload,          // payload checksum
  kWrongKey,            // a valid record, but of another key
  kWrongTokens,         // a valid record of this key but other tokens: a hash collision
  kWrongParent,         // ... or another parent block: a collision of the chained hash
};
const char* record_status_name(RecordStatus s);

std::vector<uint8_t> encode_record(uint64_t key, std::span<const int32_t> tokens, std::span<const uint8_t> payload,
                                   TrafficClass traffic_class, int64_t created_ns, uint64_t parent_key = 0);

// Parses and checks the fixed header only (magic, version, limits, reserved fields); the header
// checksum needs the token ids, so parse_record checks it.
RecordStatus parse_header(std::span<const uint8_t> bytes, RecordHeader* out);

struct RecordView {
  RecordHeader header;
  std::span<const uint8_t> token_bytes;  // token_count little-endian int32
  std::span<const uint8_t> payload;
};
// Checks a whole record in `bytes` (exactly one record: no more, no less).
RecordStatus parse_record(std::span<const uint8_t> bytes, RecordView* out);
// parse_record, then: is it the record of `key` with exactly these tokens (and this parent, unless
// parent_key is 0)? A 64-bit key alone could collide; key, parent and tokens together pin the link.
RecordStatus check_record(std::span<const uint8_t> bytes, uint64_t key, std::span<const int32_t> tokens,
                          RecordView* out, uint64_t parent_key = 0);

}  // namespace dsinfer::kvstore
