#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsinfer::tokenizer {

struct TokenMapHolder {
  TokenMap map;
};

namespace {

using nlohmann::json;

constexpr int64_t kMaxId = int64_t{1} << 30;

bool optional_bool(const json& obj, const char* key, bool fallback, std::string_view where) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  DSINFER_CHECK(obj[key].is_boolean(), where, ": \"", key, "\" must be true or false");
  return obj[key].get<bool>();
}

bool is_empty_string_or_null(const json& obj, const char* key) {
  return !obj.contains(key) || obj[key].is_null() || (obj[key].is_string() && obj[key].get<std::string>().empty());
}

// Only the identity is supported: no normalizer, or a Sequence of nothing.
void check_normalizer(const json& n, std::string_view where) {
  if (n.is_null()) return;
  DSINFER_CHECK(n.is_object() && n.contains("type") && n["type"].is_string(), where,
                ": \"normalizer\" must be null or an object with a \"type\"");
  const std::string type = n["type"].get<std::string>();
  DSINFER_CHECK(type == "Sequence", where, ": unsupported normalizer \"", type,
                "\" (only none or an empty Sequence, as in the DeepSeek tokenizers)");
  DSINFER_CHECK(n.contains("normalizers") && n["normalizers"].is_array(), where,
                ": Sequence normalizer needs a \"normalizers\" array");
  for (const auto& child : n["normalizers"]) check_normalizer(child, where);
}

void check_decoder(const json& d, std::string_view where) {
  DSINFER_CHECK(d.is_object() && d.contains("type") && d["type"].is_string(), where,
                ": \"decoder\" must be an object with a \"type\" (ByteLevel)");
  const std::string type = d["type"].get<std::string>();
  if (type == "Sequence") {
    DSINFER_CHECK(d.contains("decoders") && d["decoders"].is_array() && !d["decoders"].empty(), where,
                  ": Sequence decoder needs a non-empty \"decoders\" array");
    for (const auto& child : d["decoders"]) check_decoder(child, where);
    return;
  }
  DSINFER_CHECK(type == "ByteLevel", where, ": unsupported decoder \"", type, "\" (only ByteLevel)");
}

std::pair<std::string, std::string> parse_merge(const json& m, size_t index, std::string_view where) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ');
    DSINFER_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos, where, ": merge ",
                  index, " \"", s, "\" must be two tokens separated by one space");
    return {s.substr(0, space), s.substr(space + 1)};
  }
  DSINFER_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), where, ": merge ", index,
                " must be \"a b\" or [\"a\", \"b\"]");
  return {m[0].get<std::string>(), m[1].get<std::string>()};
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DSINFER_CHECK(in.good(), "cannot open tokenizer file ", path, ": ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  DSINFER_CHECK(!in.bad(), "cannot read tokenizer file ", path);
  return from_json_text(text.str(), path);
}

Tokenizer Tokenizer::from_json_text(std::string_view json_text, std::string_view source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    core::fail(source, ": not valid JSON: ", e.what());
  }
  DSINFER_CHECK(j.is_object(), source, ": the top level must be an object");
  DSINFER_CHECK(j.contains("model") && j["model"].is_object(), source, ": missing \"model\" object");
  const json& model = j["model"];
  if (model.contains("type")) {
    DSINFER_CHECK(model["type"].is_string() && model["type"].get<std::string>() == "BPE", source,
                  ": model \"type\" is ", model["type"].dump(), "; only BPE is supported");
  }
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    DSINFER_CHECK(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0, source,
                  ": model \"dropout\" must be null (BPE dropout is random, not supported)");
  }
  DSINFER_CHECK(is_empty_string_or_null(model, "continuing_subword_prefix"), source,
                ": model \"continuing_subword_prefix\" is not supported");
  DSINFER_CHECK(is_empty_string_or_null(model, "end_of_word_suffix"), source,
                ": model \"end_of_word_suffix\" is not supported");
  DSINFER_CHECK(model.contains("vocab") && model["vocab"].is_object(), source, ": missing model \"vocab\" object");
  DSINFER_CHECK(model.contains("merges") && model["merges"].is_array(), source, ": missing model \"merges\" array");

  Tokenizer t;
  t.vocab_ = std::make_unique<TokenMapHolder>();
  TokenMap& vocab = t.vocab_->map;
  vocab.reserve(model["vocab"].size() * 2);
  int64_t max_id = -1;
  for (const auto& [token, id] : model["vocab"].items()) {
    DSINFER_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < kMaxId, source,
                  ": vocab entry \"", token, "\" has id ", id.dump(), "; ids must be integers in [0, 2^30)");
    vocab.emplace(token, static_cast<int32_t>(id.get<int64_t>()));
    max_id = std::max(max_id, id.get<int64_t>());
  }

  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(model["merges"].size());
  for (size_t i = 0; i < model["merges"].size(); ++i) merges.push_back(parse_merge(model["merges"][i], i, source));

  Bpe::Options options;
  options.ignore_merges = optional_bool(model, "ignore_merges", false, source);
  options.fuse_unk = optional_bool(model, "fuse_unk", false, source);
  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    DSINFER_CHECK(model["unk_token"].is_string(), source, ": model \"unk_token\" must be a string or null");
    const auto it = vocab.find(model["unk_token"].get<std::string>());
    DSINFER_CHECK(it != vocab.end(), source, ": unk_token ", model["unk_token"].dump(), " is not in the vocabulary");
    options.unk_id = it->second;
  }
  t.bpe_ = std::make_unique<Bpe>(vocab, merges, options, source);

  check_normalizer(j.contains("normalizer") ? j["normalizer"] : json(), source);
  DSINFER_CHECK(j.contains("pre_tokenizer"), source, ": missing \"pre_tokenizer\"");
  t.pre_tokenizer_ = std::make_unique<PreTokenizer>(PreTokenizer::from_json(j["pre_tokenizer"], source));
  DSINFER_CHECK(j.contains("decoder"), source, ": missing \"decoder\"");
  check_decoder(j["decoder"], source);

  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    DSINFER_CHECK(j["added_tokens"].is_array(), source, ": \"added_tokens\" must be an array");
    size_t index = 0;
    for (const auto& a : j["added_tokens"]) {
      const std::string where = core::str_cat(source, ": added_tokens[", index++, "]");
      DSINFER_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_integer() && a.contains("content") &&
                        a["content"].is_string(),
                    where, " must be an object with an integer \"id\" and a string \"content\"");
      const int64_t id = a["id"].get<int64_t>();
      DSINFER_CHECK(id >= 0 && id < kMaxId, where, ": id ", id, " out of range");
      AddedToken tok;
      tok.id = static_cast<int32_t>(id);
      tok.content = a["content"].get<std::string>();
      DSINFER_CHECK(!tok.content.empty(), where, ": empty \"content\"");
      tok.special = optional_bool(a, "special", false, where);
      tok.normalized = optional_bool(a, "normalized", !tok.special, where);
      tok.lstrip = optional_bool(a, "lstrip", false, where);
      tok.rstrip = optional_bool(a, "rstrip", false, where);
      tok.single_word = optional_bool(a, "single_word", false, where);
      max_id = std::max(max_id, id);
      t.added_.add(std::move(tok));
    }
  }
  t.added_.build();

  // Per-id tables: spelling (an added token's content wins over the vocabulary entry, as in Hugging
  // Face's id_to_token) and the bytes it decodes to.
  const size_t n = static_cast<size_t>(max_id + 1);
  std::vector<std::string_view> spelling(n);
  t.known_.assign(n, 0);
  t.special_.assign(n, 0);
  for (const auto& [token, id] : vocab) {
    spelling[id] = token;
    t.known_[id] = 1;
  }
  for (const AddedToken& a : t.added_.tokens()) {
    spelling[a.id] = a.content;
    t.known_[a.id] = 1;
    t.special_[a.id] = a.special ? 1 : 0;
  }
  t.bytes_off_.assign(n + 1, 0);
  t.spelling_off_.assign(n + 1, 0);
  for (size_t id = 0; id < n; ++id) {
    t.spellings_.append(spelling[id]);
    t.spelling_off_[id + 1] = static_cast<uint32_t>(t.spellings_.size());
    if (!byte_level::decode(spelling[id], t.bytes_)) t.bytes_.append(spelling[id]);
    t.bytes_off_[id + 1] = static_cast<uint32_t>(t.bytes_.size());
  }
  return t;
}

bool Tokenizer::has_cut_points() const { return pre_tokenizer_->has_cut_points(); }

void Tokenizer::encode_plain_into(std::string_view text, std::vector<int32_t>& out) const {
  Bpe::Caches& caches = bpe_->thread_caches();
  pre_tokenizer_->split(text, [&](std::string_view word) { bpe_->encode_word(word, out, caches); });
}

void Tokenizer::build_units(std::string_view text, bool added_tokens, std::vector<Segment>& out) const {
  if (text.empty()) return;
  if (added_tokens) added_.split(text, out);
  else out.push_back({0, text.size(), -1});
}

std::vector<int32_t> Tokenizer::run_units(std::string_view text, const std::vector<Segment>& segments,
                                          const EncodeOptions& options) const {
  std::vector<int32_t> out;
  core::ThreadPool* pool = options.pool;
  const bool parallel = pool != nullptr && text.size() >= options.parallel_min_bytes &&
                        (pool->size() > 1 || options.chunk_bytes > 0);
  if (!parallel) {
    out.reserve(text.size() / 3 + 8);
    for (const Segment& s : segments) {
      if (s.id >= 0) out.push_back(s.id);
      else encode_plain_into(text.substr(s.begin, s.end - s.begin), out);
    }
    return out;
  }

  // Cut long plain segments at proven-safe points, then group pieces into tasks of about `chunk` bytes.
  const size_t chunk = options.chunk_bytes > 0
                           ? options.chunk_bytes
                           : std::max<size_t>(16 * 1024, text.size() / (static_cast<size_t>(pool->size()) * 4));
  std::vector<Segment> pieces;
  for (const Segment& s : segments) {
    if (s.id >= 0 || s.end - s.begin <= chunk || !pre_tokenizer_->has_cut_points()) {
      pieces.push_back(s);
      continue;
    }
    const std::string_view seg = text.substr(s.begin, s.end - s.begin);
    size_t pos = 0;
    while (seg.size() - pos > chunk) {
      const size_t cut = pre_tokenizer_->find_cut(seg, pos + chunk, seg.size());
      if (cut == std::string_view::npos) break;
      pieces.push_back({s.begin + pos, s.begin + cut, -1});
      pos = cut;
    }
    pieces.push_back({s.begin + pos, s.end, -1});
  }
  struct Task {
    size_t first;
    size_t last;  // exclusive
  };
  std::vector<Task> tasks;
  for (size_t i = 0; i < pieces.size();) {
    size_t bytes = 0;
    size_t j = i;
    while (j < pieces.size() && (j == i || bytes < chunk)) {
      bytes += pieces[j].end - pieces[j].begin;
      ++j;
    }
    tasks.push_back({i, j});
    i = j;
  }
  std::vector<std::vector<int32_t>> results(tasks.size());
  std::exception_ptr error;
  std::mutex error_mutex;
  pool->run(static_cast<int64_t>(tasks.size()), [&](int64_t k, int) {
    try {
      auto& ids = results[k];
      for (size_t p = tasks[k].first; p < tasks[k].last; ++p) {
        const Segment& s = pieces[p];
        if (s.id >= 0) ids.push_back(s.id);
        else encode_plain_into(text.substr(s.begin, s.end - s.begin), ids);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  });
  if (error) std::rethrow_exception(error);
  size_t total = 0;
  for (const auto& r : results) total += r.size();
  out.reserve(total);
  for (const auto& r : results) out.insert(out.end(), r.begin(), r.end());
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::lossy(text);
    text = repaired;
  }
  std::vector<Segment> segments;
  build_units(text, true, segments);
  return run_units(text, segments, options);
}

std::vector<int32_t> Tokenizer::encode_plain(std::string_view text, const EncodeOptions& options) const {
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::lossy(text);
    text = repaired;
  }
  std::vector<Segment> segments;
  build_units(text, false, segments);
  return run_units(text, segments, options);
}

std::vector<int32_t> Tokenizer::encode_with_specials(std::string_view text, std::span<const SpecialRange> specials,
                                                     const EncodeOptions& options) const {
  // Rebuild the text with each plain region lossy-decoded, so offsets stay consistent.
  std::string buffer;
  std::vector<Segment> segments;
  buffer.reserve(text.size());
  size_t pos = 0;
  auto add_plain = [&](size_t begin, size_t end) {
    if (end <= begin) return;
    const size_t start = buffer.size();
    utf8::append_lossy(text.substr(begin, end - begin), buffer, true);
    segments.push_back({start, buffer.size(), -1});
  };
  for (size_t i = 0; i < specials.size(); ++i) {
    const SpecialRange& r = specials[i];
    DSINFER_CHECK(r.begin >= pos && r.begin < r.end && r.end <= text.size(), "special range ", i, " [", r.begin, ", ",
                  r.end, ") is empty, out of order, overlapping or past the end of the ", text.size(), "-byte text");
    const std::string_view spelling = text.substr(r.begin, r.end - r.begin);
    const AddedToken* tok = added_.find(spelling);
    DSINFER_CHECK(tok != nullptr, "special range ", i, " [", r.begin, ", ", r.end, ") spells \"",
                  utf8::lossy(spelling), "\", which is not an added token");
    add_plain(pos, r.begin);
    const size_t start = buffer.size();
    buffer.append(spelling);
    segments.push_back({start, buffer.size(), tok->id});
    pos = r.end;
  }
  add_plain(pos, text.size());
  return run_units(buffer, segments, options);
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(std::span<const std::string_view> texts, bool added_tokens,
                                                          const EncodeOptions& options) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  auto one = [&](size_t i) { out[i] = added_tokens ? encode(texts[i]) : encode_plain(texts[i]); };
  if (options.pool == nullptr || texts.size() < 2) {
    for (size_t i = 0; i < texts.size(); ++i) one(i);
    return out;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
  options.pool->run(static_cast<int64_t>(texts.size()), [&](int64_t i, int) {
    try {
      one(static_cast<size_t>(i));
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  });
  if (error) std::rethrow_exception(error);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (const int32_t id : ids) {
    if (!is_known(id) || (skip_special_tokens && special_[id])) continue;
    bytes.append(token_bytes(id));
  }
  if (utf8::is_valid(bytes)) return bytes;
  return utf8::lossy(bytes);
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (!is_known(id)) return {};
  return std::string_view(bytes_).substr(bytes_off_[id], bytes_off_[id + 1] - bytes_off_[id]);
}

std::optional<std::string_view> Tokenizer::id_to_token(int32_t id) const {
  if (!is_known(id)) return std::nullopt;
  return std::string_view(spellings_).substr(spelling_off_[id], spelling_off_[id + 1] - spelling_off_[id]);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* a = added_.find(token)) return a->id;
  const auto it = vocab_->map.find(token);
  if (it == vocab_->map.end()) return std::nullopt;
  return it->second;
}

std::optional<int32_t> Tokenizer::added_token_id(std::string_view content) const {
  if (const AddedToken* a = added_.find(content)) return a->id;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const { return is_known(id) && special_[id]; }

}  // namespace dsinfer::tokenizer
