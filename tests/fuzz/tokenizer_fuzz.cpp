// libFuzzer target for the tokenizer: arbitrary bytes must never crash, hang or leak, and the
// properties below must hold. The first input byte picks what to do with the rest:
//   0  encode / encode_plain of the bytes: decode gives back their lossy UTF-8 decoding, and cutting
//      the text for the pool at every proven-safe point gives the same ids;
//   1  decode / incremental decode of ids read from the bytes: same text, always valid UTF-8;
//   2  encode_with_specials with ranges read from the bytes (bad ranges must throw core::Error);
//   3  a small tokenizer with lstrip/rstrip/single_word tokens and every split behaviour.
// The V4.1 tokenizer is built from the npm V3 base below the source tree, or read from
// $DSINFER_FUZZ_TOKENIZER (a tokenizer.json).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/deepseek_v4.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

using namespace dsinfer;
using namespace dsinfer::tokenizer;

namespace {

std::unique_ptr<Tokenizer> g_v41;
std::unique_ptr<Tokenizer> g_odd;
std::unique_ptr<core::ThreadPool> g_pool;

#define FUZZ_CHECK(cond)                                                  \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::fprintf(stderr, "tokenizer_fuzz: check failed: %s\n", #cond); \
      __builtin_trap();                                                   \
    }                                                                     \
  } while (0)

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string odd_tokenizer_json() {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::encode(std::string(1, static_cast<char>(b)))] = b;
  json merges = json::array();
  int next = 256;
  for (const char* pair : {"a b", "ab c", "Ġ a", "x x", "xx xx"}) {
    const std::string s = pair;
    const auto sp = s.find(' ');
    const std::string merged = s.substr(0, sp) + s.substr(sp + 1);
    if (!vocab.contains(merged)) vocab[merged] = next++;
    merges.push_back(json::array({s.substr(0, sp), s.substr(sp + 1)}));
  }
  auto tok = [](int id, const char* content, bool special, bool normalized, bool l, bool r, bool w) {
    return json{{"id", id}, {"content", content}, {"special", special}, {"normalized", normalized},
                {"lstrip", l},  {"rstrip", r},        {"single_word", w}};
  };
  json added = json::array({tok(400, "<s>", true, false, true, true, false), tok(401, "ab", false, true, false, false, true),
                            tok(402, "  ", false, true, false, true, false), tok(403, "<s>x", false, true, true, false, false)});
  auto split = [](const char* re, const char* behavior, bool invert) {
    return json{{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", behavior}, {"invert", invert}};
  };
  json pre = {{"type", "Sequence"},
              {"pretokenizers",
               {split("\\d", "MergedWithPrevious", false), split("x*", "MergedWithNext", false),
                split("\\s", "Contiguous", false), split("[,;]", "Removed", false), split("q", "Isolated", true),
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}};
  json j = {{"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer", pre},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  return j.dump();
}

void fuzz_encode(const Tokenizer& t, std::string_view text, uint8_t knob) {
  const std::string expected = utf8::lossy(text);
  const auto ids = t.encode(text);
  FUZZ_CHECK(t.decode(ids) == expected);
  const auto plain = t.encode_plain(text);
  FUZZ_CHECK(t.decode(plain) == expected);
  EncodeOptions o;
  o.pool = g_pool.get();
  o.parallel_min_bytes = 0;
  o.chunk_bytes = 1 + (knob & 15);
  FUZZ_CHECK(t.encode(text, o) == ids);
  FUZZ_CHECK(t.encode_plain(text, o) == plain);
}

void fuzz_decode(const Tokenizer& t, const uint8_t* data, size_t size, bool skip) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 2 < size; i += 3) {
    const int32_t raw = (data[i] << 16) | (data[i + 1] << 8) | data[i + 2];  // 0 .. 16.7M
    ids.push_back(raw % 2 ? raw % 512 : raw % 129400 - 60);                 // many byte tokens, some unknown
  }
  const std::string whole = t.decode(ids, skip);
  FUZZ_CHECK(utf8::is_valid(whole));
  IncrementalDecoder d(t, skip);
  std::string streamed;
  for (const int32_t id : ids) {
    const std::string piece = d.step(id);
    FUZZ_CHECK(utf8::is_valid(piece));
    streamed += piece;
  }
  streamed += d.flush();
  FUZZ_CHECK(streamed == whole);
}

void fuzz_specials(const Tokenizer& t, const uint8_t* data, size_t size) {
  if (size < 1) return;
  // data[0]: number of ranges; then (begin, length) byte pairs; then the text.
  const size_t n_ranges = data[0] % 4;
  const size_t header = std::min(size, 1 + 2 * n_ranges);
  const std::string_view text(reinterpret_cast<const char*>(data) + header, size - header);
  std::vector<SpecialRange> ranges;
  for (size_t r = 0; 2 + 2 * r < header; ++r) {
    const size_t b = data[1 + 2 * r] % (text.size() + 1);
    ranges.push_back({b, b + data[2 + 2 * r] % 32});
  }
  try {
    const auto ids = t.encode_with_specials(text, ranges);
    FUZZ_CHECK(utf8::is_valid(t.decode(ids)));
  } catch (const core::Error&) {
    // Ranges that are out of order or do not spell an added token are refused; that is the contract.
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string json;
  if (const char* path = std::getenv("DSINFER_FUZZ_TOKENIZER"); path && *path) {
    json = read_file(path);
  } else {
    const std::string base_path = std::string(DSINFER_SOURCE_DIR) + "/" + kNpmV3BasePath;
    const std::string base = read_file(base_path);
    if (base.empty()) {
      std::fprintf(stderr, "tokenizer_fuzz: %s is missing (run scripts/setup.sh) and DSINFER_FUZZ_TOKENIZER is unset\n",
                   base_path.c_str());
      std::exit(1);
    }
    json = build_deepseek_tokenizer_json(base, DeepseekVersion::kV41, base_path);
  }
  g_v41 = std::make_unique<Tokenizer>(Tokenizer::from_json_text(json, "fuzz tokenizer"));
  g_odd = std::make_unique<Tokenizer>(Tokenizer::from_json_text(odd_tokenizer_json(), "odd tokenizer"));
  g_pool = std::make_unique<core::ThreadPool>(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const uint8_t* rest = data + 1;
  const size_t n = size - 1;
  const std::string_view text(reinterpret_cast<const char*>(rest), n);
  switch (mode % 4) {
    case 0:
      fuzz_encode(*g_v41, text, mode >> 2);
      break;
    case 1:
      fuzz_decode(*g_v41, rest, n, (mode >> 2) & 1);
      break;
    case 2:
      fuzz_specials(*g_v41, rest, n);
      break;
    default: {
      const auto ids = g_odd->encode(text);
      FUZZ_CHECK(utf8::is_valid(g_odd->decode(ids)));
      // A Removed split drops text, so no round trip here; the output must still be valid.
      FUZZ_CHECK(utf8::is_valid(g_odd->decode(g_odd->encode_plain(text))));
      fuzz_decode(*g_odd, rest, n, mode & 8);
      break;
    }
  }
  return 0;
}
