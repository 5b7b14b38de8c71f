// Added tokens of a tokenizer.json and how Hugging Face finds them in text: leftmost-longest matching
// (an Aho-Corasick LeftmostLongest search there, a byte trie here), first over the raw text for the
// tokens with normalized=false, then over the remaining gaps for those with normalized=true, with
// the single_word, lstrip and rstrip rules of AddedVocabulary::find_matches.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dsinfer::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;     // removed by skip_special_tokens
  bool normalized = false;  // matched after normalisation (second pass)
  bool lstrip = false;      // swallows whitespace on its left
  bool rstrip = false;      // swallows whitespace on its right
  bool single_word = false; // only matches as a whole word
};

// A piece of text to encode: an added token (id >= 0) or plain text (id == -1).
struct Segment {
  size_t begin = 0;
  size_t end = 0;
  int32_t id = -1;
};

class AddedVocabulary {
 public:
  // Replaces any token with the same content. Call build() after the last add().
  void add(AddedToken token);
  void build();

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* find(std::string_view content) const;
  bool empty() const { return tokens_.empty(); }

  // Appends the segments of `text` (valid UTF-8; a normalizer is the identity here) to `out`.
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  // A byte trie; node 0 is the root. `token` is an index into tokens_ or -1.
  struct Node {
    int32_t token = -1;
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
  };
  struct Trie {
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    std::vector<unsigned char> first_bytes;  // the bytes set in first_byte
    // The longest token starting at text[pos], or -1.
    int32_t longest_at(std::string_view text, size_t pos, size_t& length) const;
    void insert(std::string_view key, int32_t token);
  };

  void split_with(const Trie& trie, std::string_view text, size_t base, std::vector<Segment>& out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, size_t> index_;  // content -> position in tokens_
  Trie raw_;         // normalized == false
  Trie normalized_;  // normalized == true
};

}  // namespace dsinfer::tokenizer
