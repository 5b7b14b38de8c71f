// The DeepSeek V4.1 added-token table: every id from 128000 to 129279 with the spelling and special flag
// of the released V4.1 tokenizer.json, transcribed from public ports (sources and the one deliberate
// exception, id 129264, in deepseek_v41_tokens.cpp and the part README). Ids 0-2 are V3's and are not
// part of this table.
#pragma once

#include <vector>

#include "tokenizer/added_vocabulary.h"

namespace dsinfer::tokenizer {

// 1,280 tokens, ascending by id, one per id from 128000 to 129279; normalized = !special except
// <|EOT|> (special and normalized, as in V3).
std::vector<AddedToken> deepseek_v41_added_range();

}  // namespace dsinfer::tokenizer
