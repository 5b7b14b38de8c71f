// The V4 / V4.1 tokenizers for recipe tests: the built files under ${DSINFER_HOME:-~/.cache/dsinfer}/tokenizers
// when present, else built in memory from the npm V3 base that scripts/setup.sh installs.
#pragma once

#include <string>

#include "tokenizer/tokenizer.h"

namespace dsinfer::recipe::testing {

// nullptr (with the reason in *why) when neither source is available.
const tokenizer::Tokenizer* deepseek_tokenizer(const std::string& name, std::string* why = nullptr);

// The "v41" tokenizer with id 129264 as the released V4.1 tokenizer.json has it: <｜deepseek_image｜>,
// special=false (the recipe's table, and so "v41", keeps <｜image｜>). nullptr as above.
const tokenizer::Tokenizer* released_v41_tokenizer(std::string* why = nullptr);

}  // namespace dsinfer::recipe::testing
