#include "kvstore/record.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <bit>
#include <cstring>

namespace dsinfer::kvstore {

static_assert(std::endian::native == std::endian::little, "records are little-endian; add byte swaps for this host");

namespace {

template <typename T>
void put(uint8_t* base, size_t offset, T value) {
  std::memcpy(base + offset, &value, sizeof(T));
}
template <typename T>
T get(const uint8_t* base, size_t offset) {
  T value;
  std::memcpy(&value, base + offset, sizeof(T));
  return value;
}

// Field offsets (README.md, "Record format").
constexpr size_t kOffMagic = 0, kOffVersion = 4, kOffClass = 6, kOffReserved8 = 7, kOffKey = 8, kOffTokens = 16,
                 kOffReserved32 = 20, kOffPayloadBytes = 24, kOffPayloadSum = 32, kOffCreated = 40,
                 kOffParent = 48, kOffHeaderSum = 56;

uint64_t header_checksum(const uint8_t* header, std::span<const uint8_t> token_bytes) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, header, kOffHeaderSum);
  XXH3_64bits_update(&state, token_bytes.data(), token_bytes.size());
  return XXH3_64bits_digest(&state);
}

}  // namespace

const char* record_status_name(RecordStatus s) {
  switch (s) {
    case RecordStatus::kOk: return "ok";
    case RecordStatus::kTruncated: return "truncated";
    case RecordStatus::kTooLong: return "trailing bytes";
    case RecordStatus::kBadMagic: return "bad magic";
    case RecordStatus::kBadVersion: return "unsupported version";
    case RecordStatus::kBadHeader: return "header checksum mismatch";
    case RecordStatus::kBadSize: return "sizes beyond limits";
    case RecordStatus::kBadPayload: return "payload checksum mismatch";
    case RecordStatus::kWrongKey: return "record of another key";
    case RecordStatus::kWrongTokens: return "tokens differ (hash collision)";
    case RecordStatus::kWrongParent: return "parent block differs (hash collision)";
  }
  return "?";
}

std::vector<uint8_t> encode_record(uint64_t key, std::span<const int32_t> tokens, std::span<const uint8_t> payload,
                                   TrafficClass traffic_class, int64_t created_ns, uint64_t parent_key) {
  const size_t token_bytes = tokens.size() * sizeof(int32_t);
  std::vector<uint8_t> out(kRecordHeaderBytes + token_bytes + payload.size());
  uint8_t* h = out.data();
  put<uint32_t>(h, kOffMagic, kRecordMagic);
  put<uint16_t>(h, kOffVersion, kRecordVersion);
  put<uint8_t>(h, kOffClass, static_cast<uint8_t>(traffic_class));
  put<uint8_t>(h, kOffReserved8, 0);
  put<uint64_t>(h, kOffKey, key);
  put<uint32_t>(h, kOffTokens, static_cast<uint32_t>(tokens.size()));
  put<uint32_t>(h, kOffReserved32, 0);
  put<uint64_t>(h, kOffPayloadBytes, payload.size());
  put<uint64_t>(h, kOffPayloadSum, XXH3_64bits(payload.data(), payload.size()));
  put<int64_t>(h, kOffCreated, created_ns);
  put<uint64_t>(h, kOffParent, parent_key);
  if (token_bytes) std::memcpy(h + kRecordHeaderBytes, tokens.data(), token_bytes);
  if (!payload.empty()) std::memcpy(h + kRecordHeaderBytes + token_bytes, payload.data(), payload.size());
  put<uint64_t>(h, kOffHeaderSum, header_checksum(h, {h + kRecordHeaderBytes, token_bytes}));
  return out;
}

RecordStatus parse_header(std::span<const uint8_t> bytes, RecordHeader* out) {
  if (bytes.size() < kRecordHeaderBytes) return RecordStatus::kTruncated;
  const uint8_t* h = bytes.data();
  RecordHeader r;
  r.magic = get<uint32_t>(h, kOffMagic);
  if (r.magic != kRecordMagic) return RecordStatus::kBadMagic;
  r.version = get<uint16_t>(h, kOffVersion);
  if (r.version != kRecordVersion) return RecordStatus::kBadVersion;
  const uint8_t cls = get<uint8_t>(h, kOffClass);
  if (cls >= kTrafficClasses || get<uint8_t>(h, kOffReserved8) != 0 || get<uint32_t>(h, kOffReserved32) != 0) {
    return RecordStatus::kBadHeader;
  }
  r.traffic_class = static_cast<TrafficClass>(cls);
  r.key = get<uint64_t>(h, kOffKey);
  r.token_count = get<uint32_t>(h, kOffTokens);
  r.payload_bytes = get<uint64_t>(h, kOffPayloadBytes);
  if (r.token_count > kMaxRecordTokens || r.payload_bytes > kMaxRecordPayloadBytes) return RecordStatus::kBadSize;
  r.payload_checksum = get<uint64_t>(h, kOffPayloadSum);
  r.created_ns = get<int64_t>(h, kOffCreated);
  r.parent_key = get<uint64_t>(h, kOffParent);
  r.header_checksum = get<uint64_t>(h, kOffHeaderSum);
  *out = r;
  return RecordStatus::kOk;
}

RecordStatus parse_record(std::span<const uint8_t> bytes, RecordView* out) {
  RecordHeader h;
  if (auto s = parse_header(bytes, &h); s != RecordStatus::kOk) return s;
  // Both sizes are bounded above, so this sum cannot wrap.
  const uint64_t token_bytes = uint64_t{h.token_count} * sizeof(int32_t);
  const uint64_t expected = kRecordHeaderBytes + token_bytes + h.payload_bytes;
  if (bytes.size() < expected) return RecordStatus::kTruncated;
  if (bytes.size() > expected) return RecordStatus::kTooLong;
  const auto tokens = bytes.subspan(kRecordHeaderBytes, token_bytes);
  if (header_checksum(bytes.data(), tokens) != h.header_checksum) return RecordStatus::kBadHeader;
  const auto payload = bytes.subspan(kRecordHeaderBytes + token_bytes);
  if (XXH3_64bits(payload.data(), payload.size()) != h.payload_checksum) return RecordStatus::kBadPayload;
  *out = RecordView{h, tokens, payload};
  return RecordStatus::kOk;
}

RecordStatus check_record(std::span<const uint8_t> bytes, uint64_t key, std::span<const int32_t> tokens,
                          RecordView* out, uint64_t parent_key) {
  RecordView v;
  if (auto s = parse_record(bytes, &v); s != RecordStatus::kOk) return s;
  if (v.header.key != key) return RecordStatus::kWrongKey;
  if (v.token_bytes.size() != tokens.size() * sizeof(int32_t) ||
      (!tokens.empty() && std::memcmp(v.token_bytes.data(), tokens.data(), v.token_bytes.size()) != 0)) {
    return RecordStatus::kWrongTokens;
  }
  if (parent_key != 0 && v.header.parent_key != parent_key) return RecordStatus::kWrongParent;
  *out = v;
  return RecordStatus::kOk;
}

}  // namespace dsinfer::kvstore
