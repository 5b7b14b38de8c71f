#include "tokenizer/deepseek_v4.h"

#include <cstdlib>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/deepseek_v41_tokens.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::tokenizer {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

AddedToken token(int32_t id, std::string content, bool special) {
  AddedToken t;
  t.id = id;
  t.content = std::move(content);
  t.special = special;
  t.normalized = !special;  // V3's convention (and Hugging Face's default)
  return t;
}

// The V3 added tokens the V4 family keeps (ids 0-2 and 128000-128814), with V3's flags.
std::map<int32_t, AddedToken> v3_added_tokens() {
  std::map<int32_t, AddedToken> m;
  m[0] = token(0, "<｜begin▁of▁sentence｜>", true);
  m[1] = token(1, "<｜end▁of▁sentence｜>", true);
  m[2] = token(2, "<｜▁pad▁｜>", true);
  for (int32_t n = 0; n < 800; ++n) m[128000 + n] = token(128000 + n, core::str_cat("<｜place▁holder▁no▁", n, "｜>"), true);
  const char* names[] = {"<｜fim▁hole｜>",          "<｜fim▁begin｜>",        "<｜fim▁end｜>",
                         "<｜User｜>",              "<｜Assistant｜>",        "<|EOT|>",
                         "<｜tool▁calls▁begin｜>",  "<｜tool▁calls▁end｜>",   "<｜tool▁call▁begin｜>",
                         "<｜tool▁call▁end｜>",     "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>",
                         "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>",  "<｜tool▁sep｜>"};
  for (int32_t k = 0; k < 15; ++k) m[128800 + k] = token(128800 + k, names[k], false);
  m[128805].special = true;  // <|EOT|> is special but normalized in V3
  m[128805].normalized = true;
  return m;
}

// Finds the value of a top-level key of a JSON object text: [begin, end) byte offsets.
std::pair<size_t, size_t> top_level_value(std::string_view text, std::string_view key, std::string_view name) {
  size_t i = 0;
  auto ws = [&] {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) ++i;
  };
  auto skip_string = [&] {  // at '"'
    ++i;
    while (i < text.size() && text[i] != '"') i += text[i] == '\\' ? 2 : 1;
    DSINFER_CHECK(i < text.size(), name, ": unterminated string");
    ++i;
  };
  auto skip_value = [&] {
    if (text[i] == '"') return skip_string();
    int depth = 0;
    while (i < text.size()) {
      const char c = text[i];
      if (c == '"') {
        skip_string();
        if (depth == 0) return;
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      else if (c == '}' || c == ']') {
        if (depth == 0) return;
        if (--depth == 0) {
          ++i;
          return;
        }
      } else if (depth == 0 && (c == ',')) return;
      ++i;
    }
  };
  ws();
  DSINFER_CHECK(i < text.size() && text[i] == '{', name, ": the top level is not an object");
  ++i;
  for (;;) {
    ws();
    DSINFER_CHECK(i < text.size() && text[i] == '"', name, ": expected a key at byte ", i);
    const size_t key_begin = i + 1;
    skip_string();
    const std::string_view k = text.substr(key_begin, i - 1 - key_begin);
    ws();
    DSINFER_CHECK(i < text.size() && text[i] == ':', name, ": expected ':' at byte ", i);
    ++i;
    ws();
    const size_t value_begin = i;
    skip_value();
    if (k == key) return {value_begin, i};
    ws();
    DSINFER_CHECK(i < text.size() && text[i] == ',', name, ": no top-level \"", key, "\"");
    ++i;
  }
}

// Hugging Face's layout: 4-space indentation, the array at depth 1.
std::string added_tokens_text(const std::vector<AddedToken>& tokens) {
  std::string out = "[\n";
  for (size_t i = 0; i < tokens.size(); ++i) {
    const AddedToken& t = tokens[i];
    ordered_json o;
    o["id"] = t.id;
    o["content"] = t.content;
    o["single_word"] = t.single_word;
    o["lstrip"] = t.lstrip;
    o["rstrip"] = t.rstrip;
    o["normalized"] = t.normalized;
    o["special"] = t.special;
    const std::string dumped = o.dump(4);
    out += "        ";
    for (const char c : dumped) {
      out.push_back(c);
      if (c == '\n') out += "    ";
    }
    out += i + 1 < tokens.size() ? ",\n" : "\n";
  }
  out += "    ]";
  return out;
}

struct ReferenceCase {
  const char* text;
  std::vector<int32_t> ids;
};

}  // namespace

std::optional<DeepseekVersion> parse_deepseek_version(std::string_view name) {
  if (name == "v4") return DeepseekVersion::kV4;
  if (name == "v41" || name == "v4.1") return DeepseekVersion::kV41;
  return std::nullopt;
}

std::string_view deepseek_version_name(DeepseekVersion version) {
  return version == DeepseekVersion::kV4 ? "v4" : "v41";
}

std::vector<AddedToken> deepseek_added_tokens(DeepseekVersion version) {
  std::map<int32_t, AddedToken> m = v3_added_tokens();
  if (version == DeepseekVersion::kV41) {
    // The released V4.1 table covers every id from 128000 up (deepseek_v41_tokens.h).
    for (AddedToken& t : deepseek_v41_added_range()) m[t.id] = std::move(t);
  } else {
    m[128821] = token(128821, "<think>", false);
    m[128822] = token(128822, "</think>", false);
    m[128825] = token(128825, "｜DSML｜", false);
    m[128828] = token(128828, "<｜latest_reminder｜>", false);
    m[128829] = token(128829, "<｜action｜>", false);
    m[129264] = token(129264, "<｜image｜>", true);
    const char* table[] = {"<｜/table>｜", "<｜table｜>", "<｜/td｜>", "<｜td｜>", "<｜/tr｜>", "<｜tr｜>"};
    for (int32_t k = 0; k < 6; ++k) m[129265 + k] = token(129265 + k, table[k], false);
    m[129279] = token(129279, "<｜image2｜>", false);
    for (int32_t id = 128000; id < kDeepseekVocabSize; ++id)
      if (!m.count(id)) m[id] = token(id, core::str_cat("<｜place▁holder▁no▁", id - 128000, "｜>"), true);
  }
  std::vector<AddedToken> out;
  out.reserve(m.size());
  for (auto& [id, t] : m) out.push_back(std::move(t));
  return out;
}

std::string build_deepseek_tokenizer_json(std::string_view v3_base_text, DeepseekVersion version,
                                          std::string_view base_name) {
  json base;
  try {
    base = json::parse(v3_base_text);
  } catch (const json::exception& e) {
    core::fail(base_name, ": not valid JSON: ", e.what());
  }
  DSINFER_CHECK(base.is_object() && base.contains("model") && base["model"].is_object() &&
                    base["model"].contains("vocab") && base["model"].contains("merges"),
                base_name, ": not a tokenizer.json (no model vocab/merges)");
  const size_t vocab = base["model"]["vocab"].size();
  const size_t merges = base["model"]["merges"].size();
  DSINFER_CHECK(vocab == 128000 && merges == 127741, base_name, ": has ", vocab, " tokens and ", merges,
                " merges; the DeepSeek V3 base has 128000 and 127741");
  DSINFER_CHECK(base.contains("added_tokens") && base["added_tokens"].is_array(), base_name, ": no \"added_tokens\"");
  const auto v3 = v3_added_tokens();
  for (const auto& a : base["added_tokens"]) {
    const int32_t id = a.value("id", -1);
    if (id == 0 || id == 1 || id == 2) {
      DSINFER_CHECK(a.value("content", std::string()) == v3.at(id).content, base_name, ": added token ", id, " is ",
                    a.value("content", std::string()), ", not ", v3.at(id).content, " as in DeepSeek V3");
    }
  }

  const auto [begin, end] = top_level_value(v3_base_text, "added_tokens", base_name);
  std::string out;
  out.reserve(v3_base_text.size() + 256 * 1024);
  out.append(v3_base_text.substr(0, begin));
  out.append(added_tokens_text(deepseek_added_tokens(version)));
  out.append(v3_base_text.substr(end));

  // Self-check: the result loads and gives the reference ids of recipe.md §7 / the shared cases.
  const Tokenizer t = Tokenizer::from_json_text(out, core::str_cat(base_name, " (", deepseek_version_name(version), ")"));
  const std::vector<ReferenceCase> cases = {
      {"Hello, world!", {19923, 14, 2058, 3}},
      {"1234567890", {6895, 18009, 25744, 18}},
      {"中文测试", {21134, 10251}},
      {"<｜User｜>hi<｜Assistant｜>", {128803, 6366, 128804}},
      {"<｜DSML｜ calls>", {30, 128825, 10699, 32}},
      {"<think>reasoning here</think>", {128821, 86512, 288, 2155, 128822}},
      {"Hello <｜image｜> world", {19923, 223, 129264, 2058}},
  };
  for (const auto& c : cases) {
    DSINFER_CHECK(t.encode(c.text) == c.ids, base_name, ": the built ", deepseek_version_name(version),
                  " tokenizer does not reproduce the reference ids of \"", c.text, "\"");
  }
  DSINFER_CHECK(t.vocab_size() == kDeepseekVocabSize, base_name, ": built tokenizer has ", t.vocab_size(), " ids");
  return out;
}

std::string build_deepseek_tokenizer_config(DeepseekVersion version) {
  ordered_json c;
  c["add_bos_token"] = false;
  c["add_eos_token"] = false;
  c["bos_token"] = "<｜begin▁of▁sentence｜>";
  c["clean_up_tokenization_spaces"] = false;
  c["eos_token"] = "<｜end▁of▁sentence｜>";
  c["legacy"] = true;
  c["model_max_length"] = 1048576;
  c["pad_token"] = version == DeepseekVersion::kV4 ? "<｜end▁of▁sentence｜>" : "<｜▁pad▁｜>";
  c["tokenizer_class"] = "PreTrainedTokenizerFast";
  c["unk_token"] = nullptr;
  return c.dump(2) + "\n";
}

std::string deepseek_tokenizer_dir(DeepseekVersion version) {
  std::string home;
  if (const char* h = std::getenv("DSINFER_HOME"); h && *h) {
    home = h;
  } else {
    const char* user_home = std::getenv("HOME");
    home = core::str_cat(user_home && *user_home ? user_home : ".", "/.cache/dsinfer");
  }
  return core::str_cat(home, "/tokenizers/", deepseek_version_name(version));
}

}  // namespace dsinfer::tokenizer
