#include "recipe/golden.h"

#include <regex>

#include "recipe/convert.h"
#include "recipe/prompt.h"
#include "recipe/prompt_encoder.h"
#include "recipe/stream/stream_processor.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::recipe {
namespace {

std::string record_string(const Json& record, const char* key) {
  auto it = record.find(key);
  return it != record.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Protocol record_protocol(const Json& record) {
  const std::string name = record_string(record, "protocol");
  if (auto p = parse_protocol(name)) return *p;
  core::fail("unknown protocol '", name, "'");
}

PromptVersion record_version(const Json& record) {
  return record_string(record, "encoding") == "v4" ? PromptVersion::kV4 : PromptVersion::kV41;
}

const tokenizer::Tokenizer& need_tokenizer(const GoldenEnvironment& env, const std::string& name) {
  const tokenizer::Tokenizer* t = env.tokenizer ? env.tokenizer(name) : nullptr;
  DSINFER_CHECK(t != nullptr, "the ", name, " tokenizer is not available");
  return *t;
}

Json image_sources_json(const std::vector<ImageSource>& sources) {
  Json list = Json::array();
  for (const auto& s : sources) list.push_back(to_json(s));
  return list;
}

Json ids_json(const std::vector<int32_t>& ids) {
  Json list = Json::array();
  for (int32_t id : ids) list.push_back(id);
  return list;
}

// Feeds the record's mock chunks through a processor; returns the events (stream) or the response (complete).
Json run_stream(const Json& record, const GoldenEnvironment& env, bool complete) {
  const ConvertedRequest converted = convert_request(record_protocol(record), record.at("body"));
  auto generator =
      stream::make_chunk_generator(converted.protocol, stream::generator_options_for(converted, "mock-id", "deepseek-flash"));
  stream::ProcessorOptions po;
  po.label_scheme = stream::LabelScheme::kLegacy;  // the scheme the goldens were generated with
  stream::StreamProcessor processor(std::move(generator), converted.request.parsing_options, po);
  const std::optional<std::string> tokenizer_name = golden_tokenizer_name(record);
  const tokenizer::Tokenizer* tok = tokenizer_name ? &need_tokenizer(env, *tokenizer_name) : nullptr;
  if (tok) processor.set_token_decoder([tok](std::span<const int32_t> ids) { return tok->decode(ids, false); });

  Json events = Json::array();
  auto collect = [&](std::vector<stream::StreamEvent> out) {
    for (auto& e : out) events.push_back(std::move(e.data));
  };
  bool finished = false;
  for (const auto& chunk : record.at("chunks")) {
    const std::string kind = chunk.at("kind").get<std::string>();
    if (kind == "ready") {
      std::optional<std::string> fingerprint;
      if (auto it = chunk.find("system_fingerprint"); it != chunk.end() && it->is_string()) fingerprint = it->get<std::string>();
      collect(processor.push(stream::InferenceChunk::ready(chunk.value("prompt_tokens", int64_t{0}),
                                                           chunk.value("prompt_cache_hit_tokens", int64_t{0}),
                                                           fingerprint)));
    } else if (kind == "text") {
      collect(processor.push(stream::InferenceChunk::text_chunk(chunk.at("content").get<std::string>(),
                                                                chunk.value("content_tokens", int64_t{0}))));
    } else if (kind == "token") {
      collect(processor.push(stream::InferenceChunk::token(chunk.at("token_id").get<int32_t>())));
    } else if (kind == "token_text") {
      DSINFER_CHECK(tok != nullptr, "token_text chunks need a tokenizer");
      collect(processor.push_tokens(tok->encode(chunk.at("text").get<std::string>())));
    } else if (kind == "finish") {
      const std::string reason = chunk.at("finish_reason").get<std::string>();
      stream::InferenceFinish f = stream::InferenceFinish::kStop;
      if (reason == "length") f = stream::InferenceFinish::kLength;
      else if (reason == "content_filter") f = stream::InferenceFinish::kContentFilter;
      else DSINFER_CHECK(reason == "stop", "unknown finish_reason '", reason, "'");
      collect(processor.push(stream::InferenceChunk::finished(f)));
      finished = true;
    } else {
      core::fail("unknown chunk kind '", kind, "'");
    }
  }
  if (!finished) collect(processor.finish());
  if (complete) return processor.response();
  Json result = Json::object();
  result["events"] = std::move(events);
  return result;
}

Json run_numbers(const Json& record) {
  Json compact = Json::array(), python = Json::array();
  for (const auto& literal : record.at("numbers")) {
    const Json value = parse_json(literal.get<std::string>());
    DSINFER_CHECK(value.is_number(), "not a number: ", literal.get<std::string>());
    compact.push_back(to_compact_json(value));
    python.push_back(to_python_json(value));
  }
  Json result = Json::object();
  result["compact"] = std::move(compact);
  result["python"] = std::move(python);
  return result;
}

Json run_op(const Json& record, const GoldenEnvironment& env) {
  const std::string op = record_string(record, "op");
  Json result = Json::object();
  if (op == "convert") {
    return to_json(convert_request(record_protocol(record), record.at("body")).request);
  }
  if (op == "render" || op == "encode") {
    const ConvertedRequest converted = convert_request(record_protocol(record), record.at("body"));
    const RenderedPrompt rendered = render_conversation(converted.request.conversation, record_version(record));
    if (op == "render") {
      result["prompt"] = rendered.prompt;
      result["image_sources"] = image_sources_json(rendered.image_sources);
      return result;
    }
    const PromptEncoder encoder(need_tokenizer(env, *golden_tokenizer_name(record)), env.pool);
    result["ids"] = ids_json(encoder.encode(rendered));
    return result;
  }
  if (op == "stream") return run_stream(record, env, false);
  if (op == "complete") return run_stream(record, env, true);
  if (op == "tokenize") {
    result["ids"] = ids_json(need_tokenizer(env, *golden_tokenizer_name(record)).encode(record.at("text").get<std::string>()));
    return result;
  }
  if (op == "detokenize") {
    std::vector<int32_t> ids = record.at("ids").get<std::vector<int32_t>>();
    const bool skip = record.value("skip_special_tokens", false);
    result["text"] = need_tokenizer(env, *golden_tokenizer_name(record)).decode(ids, skip);
    return result;
  }
  if (op == "stringify") {
    result["text"] = to_python_json(record.at("value"));
    return result;
  }
  if (op == "numbers") return run_numbers(record);
  if (op == "image") core::fail("image preprocessing (decode, resize, WebP) is not part of this port");
  core::fail("unknown op '", op, "'");
}

}  // namespace

std::optional<std::string> golden_tokenizer_name(const Json& record) {
  const std::string op = record_string(record, "op");
  const std::string named = record_string(record, "tokenizer");
  if (op == "encode") return named.empty() ? std::string(to_string(record_version(record))) : named;
  if (op == "tokenize" || op == "detokenize") return named.empty() ? std::string("v41") : named;
  if ((op == "stream" || op == "complete") && !named.empty()) return named;
  return std::nullopt;
}

std::string run_golden_record(const Json& record, const GoldenEnvironment& env) {
  Json line = Json::object();
  try {
    Json result = run_op(record, env);
    line["ok"] = true;
    line["result"] = std::move(result);
  } catch (const ConversionError& e) {
    Json error = Json::object();
    error["kind"] = e.kind_name();
    error["detail"] = e.what();
    line["ok"] = false;
    line["error"] = std::move(error);
  } catch (const std::exception& e) {
    Json error = Json::object();
    error["kind"] = "internal";
    error["detail"] = e.what();
    line["ok"] = false;
    line["error"] = std::move(error);
  }
  line["name"] = record_string(record, "name");
  return to_compact_json(line);
}

std::string normalize_golden_timestamps(std::string_view line) {
  static const std::regex kTimestamp("\"(created|created_at|completed_at)\":[0-9]+");
  return std::regex_replace(std::string(line), kTimestamp, "\"$1\":0");
}

namespace {

// The path of the first difference between two JSON values, or "" when equal.
std::string first_json_difference(const Json& a, const Json& b, const std::string& path) {
  if (a.type() != b.type()) return path + " (type)";
  if (a.is_object()) {
    auto ia = a.begin(), ib = b.begin();
    for (; ia != a.end() && ib != b.end(); ++ia, ++ib) {
      if (ia.key() != ib.key()) return core::str_cat(path, " (key order: expected '", ia.key(), "', got '", ib.key(), "')");
      std::string d = first_json_difference(ia.value(), ib.value(), path + "." + ia.key());
      if (!d.empty()) return d;
    }
    if (ia != a.end()) return core::str_cat(path, " (missing key '", ia.key(), "')");
    if (ib != b.end()) return core::str_cat(path, " (extra key '", ib.key(), "')");
    return "";
  }
  if (a.is_array()) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      std::string d = first_json_difference(a[i], b[i], core::str_cat(path, "[", i, "]"));
      if (!d.empty()) return d;
    }
    if (a.size() != b.size()) return core::str_cat(path, " (length ", a.size(), " vs ", b.size(), ")");
    return "";
  }
  return to_compact_json(a) == to_compact_json(b) ? "" : path;
}

std::string around(std::string_view s, size_t at) {
  const size_t begin = at > 60 ? at - 60 : 0;
  return core::str_cat(begin > 0 ? "..." : "", s.substr(begin, 140), begin + 140 < s.size() ? "..." : "");
}

}  // namespace

std::string golden_difference(std::string_view expected, std::string_view actual) {
  const std::string e = normalize_golden_timestamps(expected);
  const std::string a = normalize_golden_timestamps(actual);
  if (e == a) return "";
  size_t at = 0;
  while (at < e.size() && at < a.size() && e[at] == a[at]) ++at;
  std::string path = "?";
  try {
    path = first_json_difference(parse_json(e), parse_json(a), "$");
  } catch (const std::exception&) {
  }
  return core::str_cat("first difference at byte ", at, ", JSON path ", path.empty() ? "(same values, different text)" : path,
                       "\n    expected: ", around(e, at), "\n    actual:   ", around(a, at));
}

}  // namespace dsinfer::recipe
