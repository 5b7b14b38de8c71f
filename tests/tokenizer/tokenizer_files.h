// The V4 and V4.1 tokenizers for tests, built in memory from the npm V3 base (scripts/setup.sh puts
// it below the repository), so tests always check what the current builder produces.
#pragma once

#include <string>

#include "tokenizer/deepseek_v4.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::tokenizer::testing {

std::string v3_base_path();
// The base's text; fails the calling test (and returns "") if the base is missing.
const std::string& v3_base_text();
const std::string& deepseek_json(DeepseekVersion version);
const Tokenizer& deepseek(DeepseekVersion version);
std::string read_file(const std::string& path);

}  // namespace dsinfer::tokenizer::testing
