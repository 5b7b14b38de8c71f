#include "tokenizer/added_vocabulary.h"

#include <algorithm>
#include <cstring>

#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace dsinfer::tokenizer {
namespace {

// Hugging Face's word test for single_word tokens is the Rust regex `\w`: Alphabetic, Mark,
// Decimal_Number, Connector_Punctuation or Join_Control. Only single_word tokens (none in the
// DeepSeek files) use it.
bool is_word_char(std::string_view text, size_t begin, size_t end) {
  static const Regex word("^[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]$", "single_word test");
  size_t b = 0, e = 0;
  return word.find(text.substr(begin, end - begin), 0, b, e);
}

// The character that ends at `end` and the one that starts at `begin`, as byte ranges.
size_t char_start_before(std::string_view text, size_t end) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
  return b;
}
size_t char_end_after(std::string_view text, size_t begin) {
  size_t len = 0;
  utf8::decode(reinterpret_cast<const unsigned char*>(text.data()) + begin, len);
  return begin + len;
}

}  // namespace

void AddedVocabulary::add(AddedToken token) {
  const auto [it, inserted] = index_.emplace(token.content, tokens_.size());
  if (inserted) tokens_.push_back(std::move(token));
  else tokens_[it->second] = std::move(token);
}

const AddedToken* AddedVocabulary::find(std::string_view content) const {
  const auto it = index_.find(std::string(content));
  return it == index_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocabulary::Trie::insert(std::string_view key, int32_t token) {
  if (key.empty()) return;  // an empty token can never be matched
  if (!first_byte[static_cast<unsigned char>(key[0])]) first_bytes.push_back(static_cast<unsigned char>(key[0]));
  first_byte[static_cast<unsigned char>(key[0])] = true;
  int32_t node = 0;
  for (const unsigned char b : key) {
    auto& ch = nodes[node].children;
    auto it = std::lower_bound(ch.begin(), ch.end(), b, [](const auto& e, unsigned char v) { return e.first < v; });
    if (it != ch.end() && it->first == b) {
      node = it->second;
    } else {
      const int32_t created = static_cast<int32_t>(nodes.size());
      ch.insert(it, {b, created});
      nodes.emplace_back();
      node = created;
    }
  }
  nodes[node].token = token;
}

int32_t AddedVocabulary::Trie::longest_at(std::string_view text, size_t pos, size_t& length) const {
  int32_t node = 0;
  int32_t best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const unsigned char b = static_cast<unsigned char>(text[i]);
    const auto& ch = nodes[node].children;
    auto it = std::lower_bound(ch.begin(), ch.end(), b, [](const auto& e, unsigned char v) { return e.first < v; });
    if (it == ch.end() || it->first != b) break;
    node = it->second;
    if (nodes[node].token >= 0) {
      best = nodes[node].token;
      length = i + 1 - pos;
    }
  }
  return best;
}

void AddedVocabulary::build() {
  raw_ = Trie{};
  normalized_ = Trie{};
  for (size_t i = 0; i < tokens_.size(); ++i)
    (tokens_[i].normalized ? normalized_ : raw_).insert(tokens_[i].content, static_cast<int32_t>(i));
}

void AddedVocabulary::split_with(const Trie& trie, std::string_view text, size_t base, std::vector<Segment>& out) const {
  size_t start_offset = 0;  // end of the last emitted piece
  size_t pos = 0;
  // With few distinct first bytes (the usual case: '<' and the lead byte of '｜'), jump between their
  // occurrences with memchr instead of testing every byte.
  const bool few = !trie.first_bytes.empty() && trie.first_bytes.size() <= 4;
  size_t next_of[4] = {0, 0, 0, 0};
  auto next_candidate = [&](size_t from) {
    size_t best = text.size();
    for (size_t k = 0; k < trie.first_bytes.size(); ++k) {
      if (next_of[k] < from || from == 0) {
        const void* hit = std::memchr(text.data() + from, trie.first_bytes[k], text.size() - from);
        next_of[k] = hit ? static_cast<size_t>(static_cast<const char*>(hit) - text.data()) : text.size();
      }
      best = std::min(best, next_of[k]);
    }
    return best;
  };
  if (trie.first_bytes.empty()) pos = text.size();
  while (pos < text.size()) {
    if (few) {
      pos = next_candidate(pos);
      if (pos >= text.size()) break;
    } else if (!trie.first_byte[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t length = 0;
    const int32_t t = trie.longest_at(text, pos, length);
    if (t < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[t];
    size_t start = pos;
    size_t stop = pos + length;
    if (token.single_word) {
      const bool left_ok = start == 0 || !is_word_char(text, char_start_before(text, start), start);
      const bool right_ok = stop == text.size() || !is_word_char(text, stop, char_end_after(text, stop));
      if (!left_ok || !right_ok) {
        pos = stop;  // the search resumes after the discarded match, as Aho-Corasick's iterator does
        continue;
      }
    }
    if (token.lstrip) {  // whitespace on the left, but not into what an earlier match took
      while (start > start_offset) {
        const size_t b = char_start_before(text, start);
        size_t len = 0;
        if (!utf8::is_white_space(utf8::decode(reinterpret_cast<const unsigned char*>(text.data()) + b, len))) break;
        start = std::max(b, start_offset);
      }
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t len = 0;
        if (!utf8::is_white_space(utf8::decode(reinterpret_cast<const unsigned char*>(text.data()) + stop, len))) break;
        stop += len;
      }
    }
    if (start_offset < start) out.push_back({base + start_offset, base + start, -1});
    out.push_back({base + start, base + stop, token.id});
    start_offset = stop;
    pos = stop;
  }
  if (start_offset < text.size()) out.push_back({base + start_offset, base + text.size(), -1});
}

void AddedVocabulary::split(std::string_view text, std::vector<Segment>& out) const {
  if (text.empty()) return;
  const size_t first = out.size();
  split_with(raw_, text, 0, out);
  if (normalized_.nodes.size() == 1) return;
  std::vector<Segment> pass1(out.begin() + first, out.end());
  out.resize(first);
  for (const Segment& s : pass1) {
    if (s.id >= 0) out.push_back(s);
    else split_with(normalized_, text.substr(s.begin, s.end - s.begin), s.begin, out);
  }
}

}  // namespace dsinfer::tokenizer
