#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace dsinfer::tokenizer {
namespace {

// What Hugging Face's ByteLevel pre-tokenizer splits with when use_regex is true.
constexpr const char* kGpt2Pattern = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";

// The three Split patterns of the DeepSeek V3 / V4 / V4.1 tokenizer.json, exactly as the file has
// them (after JSON unescaping). find_cut() below is derived from these and only from these.
const std::string kDeepseekPatterns[3] = {
    R"re(\p{N}{1,3})re",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    std::string(R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^)re") + "\r\n" +
        R"re(\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[)re" + "\r\n" + R"re(]*|\s*[)re" + "\r\n" +
        R"re(]+|\s+(?!\S)|\s+)re",
};

SplitBehavior parse_behavior(const nlohmann::json& v, std::string_view where) {
  DSINFER_CHECK(v.is_string(), where, ": Split \"behavior\" must be a string");
  const std::string s = v.get<std::string>();
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  core::fail(where, ": unknown Split behavior \"", s, "\"");
}

bool get_bool(const nlohmann::json& spec, const char* key, bool fallback, std::string_view where) {
  if (!spec.contains(key) || spec[key].is_null()) return fallback;
  DSINFER_CHECK(spec[key].is_boolean(), where, ": \"", key, "\" must be true or false");
  return spec[key].get<bool>();
}

inline bool is_ascii_letter(unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }

// The character class of the second DeepSeek pattern.
inline bool is_cjk_kana(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x309F) || (c >= 0x30A0 && c <= 0x30FF);
}

struct Part {
  size_t begin;
  size_t end;
  bool match;
};

}  // namespace

PreTokenizer PreTokenizer::from_json(const nlohmann::json& spec, std::string_view where) {
  PreTokenizer pt;
  bool byte_level_seen = false;
  DSINFER_CHECK(!spec.is_null(), where, ": \"pre_tokenizer\" is null; only byte-level BPE tokenizers are supported");
  pt.add_step(spec, where, byte_level_seen);
  DSINFER_CHECK(byte_level_seen, where, ": the pre-tokenizer has no ByteLevel step; only byte-level BPE is supported");
  pt.deepseek_v3_ = pt.steps_.size() == 3;
  for (size_t i = 0; pt.deepseek_v3_ && i < 3; ++i) {
    const Step& s = pt.steps_[i];
    pt.deepseek_v3_ = s.behavior == SplitBehavior::kIsolated && !s.invert &&
                      s.regex->pattern() == translate_oniguruma(kDeepseekPatterns[i]);
  }
  return pt;
}

void PreTokenizer::add_step(const nlohmann::json& spec, std::string_view where, bool& byte_level_seen) {
  DSINFER_CHECK(spec.is_object() && spec.contains("type") && spec["type"].is_string(), where,
                ": a pre-tokenizer must be an object with a string \"type\"");
  const std::string type = spec["type"].get<std::string>();
  if (type == "Sequence") {
    DSINFER_CHECK(spec.contains("pretokenizers") && spec["pretokenizers"].is_array(), where,
                  ": Sequence pre-tokenizer needs a \"pretokenizers\" array");
    for (const auto& child : spec["pretokenizers"]) add_step(child, where, byte_level_seen);
    return;
  }
  if (type == "Split") {
    DSINFER_CHECK(!byte_level_seen, where,
                  ": a Split after ByteLevel would match the byte-level alphabet; not supported");
    DSINFER_CHECK(spec.contains("pattern") && spec["pattern"].is_object(), where, ": Split needs a \"pattern\" object");
    const auto& pattern = spec["pattern"];
    std::string regex;
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      regex = translate_oniguruma(pattern["Regex"].get<std::string>());
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      regex = quote_regex(pattern["String"].get<std::string>());
    } else {
      core::fail(where, ": Split \"pattern\" must be {\"Regex\": ...} or {\"String\": ...}");
    }
    Step step;
    step.regex = std::make_unique<Regex>(regex, where);
    DSINFER_CHECK(spec.contains("behavior"), where, ": Split needs a \"behavior\"");
    step.behavior = parse_behavior(spec["behavior"], where);
    step.invert = get_bool(spec, "invert", false, where);
    steps_.push_back(std::move(step));
    return;
  }
  if (type == "ByteLevel") {
    DSINFER_CHECK(!byte_level_seen, where, ": more than one ByteLevel pre-tokenizer");
    DSINFER_CHECK(!get_bool(spec, "add_prefix_space", false, where), where,
                  ": ByteLevel add_prefix_space=true is not supported");
    byte_level_seen = true;
    if (get_bool(spec, "use_regex", true, where)) {
      Step step;
      step.regex = std::make_unique<Regex>(translate_oniguruma(kGpt2Pattern), where);
      steps_.push_back(std::move(step));
    }
    return;
  }
  core::fail(where, ": unsupported pre-tokenizer type \"", type, "\" (supported: Sequence, Split, ByteLevel)");
}

void PreTokenizer::split(std::string_view text, FunctionRef<void(std::string_view)> emit) const {
  apply(0, text, emit);
}

void PreTokenizer::apply(size_t step, std::string_view piece, FunctionRef<void(std::string_view)> emit) const {
  if (piece.empty()) return;
  if (step == steps_.size()) {
    emit(piece);
    return;
  }
  const Step& s = steps_[step];
  MatchIterator it(*s.regex, piece);
  size_t b = 0, e = 0, prev = 0;
  if (s.behavior == SplitBehavior::kIsolated) {  // every part on its own, matched or not (invert is moot)
    while (it.next(b, e)) {
      if (prev < b) apply(step + 1, piece.substr(prev, b - prev), emit);
      if (b < e) apply(step + 1, piece.substr(b, e - b), emit);
      prev = e;
    }
    if (prev < piece.size()) apply(step + 1, piece.substr(prev), emit);
    return;
  }

  // The other behaviours, as Hugging Face's NormalizedString::split folds the match list.
  std::vector<Part> parts;
  while (it.next(b, e)) {
    if (prev < b) parts.push_back({prev, b, false});
    parts.push_back({b, e, true});
    prev = e;
  }
  if (prev < piece.size()) parts.push_back({prev, piece.size(), false});
  if (s.invert)
    for (auto& p : parts) p.match = !p.match;

  std::vector<Part> out;
  switch (s.behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& p : parts)
        if (!p.match) out.push_back(p);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& p : parts) {
        if (p.match && !previous_match && !out.empty()) out.back().end = p.end;
        else out.push_back(p);
        previous_match = p.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool next_match = false;
      for (size_t i = parts.size(); i-- > 0;) {
        const Part& p = parts[i];
        if (p.match && !next_match && !out.empty()) out.back().begin = p.begin;
        else out.push_back(p);
        next_match = p.match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const auto& p : parts) {
        if (p.match == previous_match && !out.empty()) out.back().end = p.end;
        else out.push_back(p);
        previous_match = p.match;
      }
      break;
    }
    case SplitBehavior::kIsolated:
      break;
  }
  for (const auto& p : out)
    if (p.end > p.begin) apply(step + 1, piece.substr(p.begin, p.end - p.begin), emit);
}

// Why these cuts are exact (steps 1-3 are the DeepSeek patterns, all Isolated, none looks behind):
// (A) letter | ' ' letter, (D) '\n' | letter: no match of any step contains both characters next to
//     the cut; the match ending at the cut ends there whatever follows (greedy letter runs and
//     newline runs stop at the cut either way, and `\s*[\r\n]+` wins over `\s+(?!\S)` for a
//     whitespace run that ends in '\n'); and a match starts exactly at the cut (" word" / "word"),
//     so every step restarts its search there in both cases.
// (B) a boundary of a run of the CJK/kana class: step 2's run ends or starts at the cut, neither
//     side is a digit run that could continue across, and step 3 sees the same pieces.
// The parallel-encode tests and the fuzzer check cut encoding against one-piece encoding.
size_t PreTokenizer::find_cut(std::string_view text, size_t from, size_t limit) const {
  if (!deepseek_v3_) return std::string_view::npos;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  limit = std::min(limit, text.size());
  for (size_t p = std::max<size_t>(from, 1); p < limit; ++p) {
    const unsigned char cur = s[p];
    if ((cur & 0xC0) == 0x80) continue;  // not a character boundary
    const unsigned char before = s[p - 1];
    if (cur == ' ' && is_ascii_letter(before) && p + 1 < text.size() && is_ascii_letter(s[p + 1])) return p;
    if (before == '\n' && is_ascii_letter(cur)) return p;
    if (cur >= 0xE3 || before >= 0x80) {
      size_t len = 0;
      const bool cjk_here = cur >= 0xE3 && cur <= 0xE9 && is_cjk_kana(utf8::decode(s + p, len));
      const bool cjk_before = before >= 0x80 && is_cjk_kana(utf8::decode_before(text, p));
      if (cjk_here != cjk_before) return p;
    }
  }
  return std::string_view::npos;
}

}  // namespace dsinfer::tokenizer
