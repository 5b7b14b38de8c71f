#include "tokenizer/deepseek_v41_tokens.h"

#include <cstdio>
#include <string>

#include "core/error.h"

namespace dsinfer::tokenizer {
namespace {

// Spellings: the V4.1 special-token table of a public Swift port of V4.1 (DeepSeek4_1ModelConfiguration,
// "reserved token spellings so Engram sees the complete vocabulary in ID order"), which agrees with the
// V4 table of a public Rust tiktoken port on every id the two versions share. Special flags: the
// "strict V4.1 profile" of a public V4.1 chat-template guide, which lists the special=true tokens of
// the released tokenizer.json (BOS, EOS, pad, end_of_query, rl_image_pad, rl_image_start and the
// eight polygon/point/box/ref tokens) and says every protocol token is special=false; V3's flags for
// the V3 ids; the recipe's tokenizer cases (tests/data/recipe) for 129264-129270 and 129279.
struct Named {
  int32_t id;
  const char* content;
  bool special;
};

constexpr Named kNamed[] = {
    {128799, "<｜System｜>", false},
    {128800, "<｜fim▁hole｜>", false},
    {128801, "<｜fim▁begin｜>", false},
    {128802, "<｜fim▁end｜>", false},
    {128803, "<｜User｜>", false},
    {128804, "<｜Assistant｜>", false},
    {128805, "<|EOT|>", true},
    {128806, "<｜tool▁calls▁begin｜>", false},
    {128807, "<｜tool▁calls▁end｜>", false},
    {128808, "<｜tool▁call▁begin｜>", false},
    {128809, "<｜tool▁call▁end｜>", false},
    {128810, "<｜tool▁outputs▁begin｜>", false},
    {128811, "<｜tool▁outputs▁end｜>", false},
    {128812, "<｜tool▁output▁begin｜>", false},
    {128813, "<｜tool▁output▁end｜>", false},
    {128814, "<｜tool▁sep｜>", false},
    {128815, "<｜begin▁of▁repo▁name｜>", false},
    {128816, "<｜end▁of▁repo▁name｜>", false},
    {128817, "<｜begin▁of▁file▁name｜>", false},
    {128818, "<｜end▁of▁file▁name｜>", false},
    {128819, "<｜begin▁of▁file｜>", false},
    {128820, "<｜end▁of▁file｜>", false},
    {128821, "<think>", false},
    {128822, "</think>", false},
    {128823, "<｜place▁holder▁for▁copy｜>", false},
    {128824, "<｜place▁holder▁for▁pointer▁replace｜>", false},
    {128825, "｜DSML｜", false},
    {128826, "<｜begin▁sys｜>", false},
    {128827, "<｜end▁sys｜>", false},
    {128828, "<｜latest_reminder｜>", false},
    {128829, "<｜action｜>", false},
    {128830, "<｜query｜>", false},
    {128831, "<｜authority｜>", false},
    {128832, "<｜domain｜>", false},
    {128833, "<｜task｜>", false},
    {128834, "<｜political｜>", false},
    {128835, "<｜entity｜>", false},
    {128836, "<｜title｜>", false},
    {128837, "<｜safety｜>", false},
    {128838, "<｜answer｜>", false},
    {128839, "<｜search｜>", false},
    {128840, "<dsml:", false},
    {128841, "</dsml:", false},
    {128842, "<｜search▁begin｜>", false},
    {128843, "<｜search▁end｜>", false},
    {128844, "<｜extracted_url｜>", false},
    {128845, "<｜read_url｜>", false},
    {128846, "<｜end_of_query｜>", true},
    {129262, "<｜rl_image_pad｜>", true},
    {129263, "<｜rl_image_start｜>", true},
    // The released tokenizer.json spells 129264 <｜deepseek_image｜> (special=false). The recipe this
    // project renders prompts with writes <｜image｜> for an image and its V4.1 tokenizer cases and
    // goldens encode that as 129264, removed by skip_special_tokens; the recipe's spelling is kept so
    // that V4.1 image prompts keep encoding (recipe.md §9 item 4).
    {129264, "<｜image｜>", true},
    {129271, "<｜/polygon｜>", true},
    {129272, "<｜polygon｜>", true},
    {129273, "<｜/point｜>", true},
    {129274, "<｜point｜>", true},
    {129275, "<｜/box｜>", true},
    {129276, "<｜box｜>", true},
    {129277, "<｜/ref｜>", true},
    {129278, "<｜ref｜>", true},
};

AddedToken make(int32_t id, std::string content, bool special) {
  AddedToken t;
  t.id = id;
  t.content = std::move(content);
  t.special = special;
  t.normalized = !special;
  return t;
}

std::string mm_span(int n) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "<|place_holder_mm_span_%04d|>", n);
  return buf;
}

}  // namespace

std::vector<AddedToken> deepseek_v41_added_range() {
  std::vector<AddedToken> out;
  out.reserve(1280);
  // V3's reserved tokens, special as in V3; 799 of them (V4.1 uses 128799 for <｜System｜>).
  for (int32_t n = 0; n < 799; ++n) out.push_back(make(128000 + n, core::str_cat("<｜place▁holder▁no▁", n, "｜>"), true));
  size_t named = 0;
  for (; named < std::size(kNamed) && kNamed[named].id <= 128846; ++named)
    out.push_back(make(kNamed[named].id, kNamed[named].content, kNamed[named].special));
  // Multimodal span placeholders 0021-0435 at 128847-129261: reserved for the vision path and never
  // written as text (the ports call them reserved special tokens), so special like 0442 below.
  for (int n = 21; n <= 435; ++n) out.push_back(make(128826 + n, mm_span(n), true));
  for (; named < std::size(kNamed) && kNamed[named].id <= 129264; ++named)
    out.push_back(make(kNamed[named].id, kNamed[named].content, kNamed[named].special));
  // 0436-0441 take the ids of V4's table tokens and, like them, are not special (recipe tokenizer cases).
  for (int n = 436; n <= 441; ++n) out.push_back(make(128829 + n, mm_span(n), false));
  for (; named < std::size(kNamed); ++named)
    out.push_back(make(kNamed[named].id, kNamed[named].content, kNamed[named].special));
  out.push_back(make(129279, mm_span(442), true));
  for (size_t i = 0; i < out.size(); ++i)
    DSINFER_CHECK(out[i].id == 128000 + static_cast<int32_t>(i), "V4.1 added-token table: id ", out[i].id,
                  " at position ", i);
  DSINFER_CHECK(out.size() == 1280, "V4.1 added-token table has ", out.size(), " tokens");
  out[128805 - 128000].normalized = true;  // <|EOT|>: special but normalized, as in V3
  return out;
}

}  // namespace dsinfer::tokenizer
