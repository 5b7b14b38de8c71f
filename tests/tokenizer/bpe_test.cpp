#include <gtest/gtest.h>

#include <random>

#include "tokenizer/byte_level.h"
#include "core/error.h"
#include "synthetic_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_files.h"

namespace dsinfer::tokenizer {
namespace {

using V = std::vector<int32_t>;

Tokenizer synthetic(const testing::SyntheticSpec& spec) {
  return Tokenizer::from_json_text(testing::synthetic_tokenizer_json(spec), "synthetic");
}

TEST(Bpe, MergesInRankOrderLeftmostFirst) {
  testing::SyntheticSpec spec;
  spec.merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"a", "a"}, {"aa", "aa"}};
  const Tokenizer t = synthetic(spec);
  // Ids: 256 he, 257 ll, 258 hell, 259 hello, 260 aa, 261 aaaa.
  EXPECT_EQ(t.encode_plain("hello"), (V{259}));
  EXPECT_EQ(t.encode_plain("hel"), (V{256, 'l'}));
  EXPECT_EQ(t.encode_plain("aaa"), (V{260, 'a'}));        // the leftmost of two equal-rank pairs first
  EXPECT_EQ(t.encode_plain("aaaaaaa"), (V{261, 260, 'a'}));
  // A word long enough for the heap-based merge loop: 1000 a's become 250 aaaa.
  EXPECT_EQ(t.encode_plain(std::string(1000, 'a')), V(250, 261));
  V odd(251, 261);
  odd.back() = 'a';
  EXPECT_EQ(t.encode_plain(std::string(1001, 'a')), odd);
}

TEST(Bpe, BothMergeFormatsGiveTheSameModel) {
  testing::SyntheticSpec spec;
  spec.merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {" ", "w"}, {"hell", "o"}};
  const Tokenizer strings = synthetic(spec);
  spec.merges_as_pairs = true;
  const Tokenizer pairs = synthetic(spec);
  for (const std::string text : {"hello world", "hell", " w", "well hello"})
    EXPECT_EQ(strings.encode(text), pairs.encode(text)) << text;
  EXPECT_EQ(pairs.encode("hello"), (V{260}));
}

TEST(Bpe, MergeSpellingsCanHoldSpacesOnlyInPairFormat) {
  // In the pair format a token may contain a literal space character (not Ġ).
  nlohmann::json vocab = {{"a", 0}, {"b", 1}, {"a b", 2}};
  for (int b = 0; b < 256; ++b) {
    const std::string s = byte_level::encode(std::string(1, static_cast<char>(b)));
    if (!vocab.contains(s)) vocab[s] = 3 + b;
  }
  nlohmann::json j = {{"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", false}}},
                      {"decoder", {{"type", "ByteLevel"}}},
                      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {{"a ", "b"}}}}}};
  EXPECT_THROW(Tokenizer::from_json_text(j.dump(), "t"), core::Error);  // "a " is not a token
  j["model"]["merges"] = {"a b c"};
  EXPECT_THROW(Tokenizer::from_json_text(j.dump(), "t"), core::Error);  // three parts
}

// A textbook BPE, written independently of the model: repeatedly merge the lowest-ranked adjacent
// pair (the leftmost among equals) until none is left.
V reference_bpe(const std::string& word, const std::map<std::pair<std::string, std::string>, int>& ranks,
                const Tokenizer& t) {
  std::vector<std::string> sym;
  for (const char c : word) sym.push_back(byte_level::encode(std::string(1, c)));
  for (;;) {
    int best_rank = INT32_MAX;
    size_t best = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      const auto it = ranks.find({sym[i], sym[i + 1]});
      if (it != ranks.end() && it->second < best_rank) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best_rank == INT32_MAX) break;
    sym[best] += sym[best + 1];
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  V ids;
  for (const auto& s : sym) ids.push_back(*t.token_to_id(s));
  return ids;
}

TEST(Bpe, MatchesATextbookBpeOnRealMergesForShortAndLongWords) {
  const std::string& json_text = testing::deepseek_json(DeepseekVersion::kV41);
  ASSERT_FALSE(json_text.empty());
  const auto j = nlohmann::json::parse(json_text);
  std::map<std::pair<std::string, std::string>, int> ranks;
  int r = 0;
  for (const auto& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    const size_t sp = s.find(' ');
    ranks.emplace(std::make_pair(s.substr(0, sp), s.substr(sp + 1)), r++);
  }
  const Tokenizer& t = testing::deepseek(DeepseekVersion::kV41);
  // Words of every length class, from an alphabet that merges a lot (English letters) and one that
  // merges little (mixed bytes of CJK text).
  std::mt19937 rng(7);
  const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
  const std::string cjk = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年";
  for (int n : {2, 3, 5, 8, 13, 40, 127, 128, 129, 200, 300}) {
    for (int rep = 0; rep < 6; ++rep) {
      std::string w;
      if (rep % 2 == 0) {
        for (int i = 0; i < n; ++i) w.push_back(letters[rng() % 13 + (rng() % 2) * (rng() % 13)]);
      } else {
        while (static_cast<int>(w.size()) < n) w += cjk.substr(3 * (rng() % (cjk.size() / 3)), 3);
      }
      // Either word is a single pre-tokenizer word (a letter run, a CJK run); the second encode
      // comes from the word cache for words up to 256 bytes.
      const V expected = reference_bpe(w, ranks, t);
      EXPECT_EQ(t.encode_plain(w), expected) << "word of " << w.size() << " bytes: " << w;
      EXPECT_EQ(t.encode_plain(w), expected) << "second (cached) encode of " << w;
    }
  }
}

}  // namespace
}  // namespace dsinfer::tokenizer
