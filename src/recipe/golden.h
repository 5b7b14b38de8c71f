// The golden corpus format of deepseek-recipe's reference generator (tests/data/recipe/README.md): one JSON
// record per line in, one result line per record out, byte-comparable with rust.jsonl. Used by the golden
// test and by `dsinfer recipe run|check`.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "recipe/json_text.h"

namespace dsinfer::core {
class ThreadPool;
}
namespace dsinfer::tokenizer {
class Tokenizer;
}

namespace dsinfer::recipe {

struct GoldenEnvironment {
  // The tokenizer named "v4" or "v41", or nullptr when it is not available.
  std::function<const tokenizer::Tokenizer*(std::string_view name)> tokenizer;
  core::ThreadPool* pool = nullptr;
};

// The tokenizer a record needs ("v4"/"v41"), or nullopt when it needs none.
std::optional<std::string> golden_tokenizer_name(const Json& record);

// Runs one corpus record: {"ok":true,"result":...,"name":...} or {"ok":false,"error":{...},"name":...}.
std::string run_golden_record(const Json& record, const GoldenEnvironment& env);

// Replaces the wall-clock values of "created", "created_at" and "completed_at" with 0.
std::string normalize_golden_timestamps(std::string_view line);

// Empty when the lines are equal after timestamp normalisation; otherwise where they first differ (JSON
// path and byte offset) with both sides around it.
std::string golden_difference(std::string_view expected, std::string_view actual);

}  // namespace dsinfer::recipe
