// A Hugging Face tokenizer.json of the byte-level BPE kind (DeepSeek V3 / V4 / V4.1, GPT-2 style):
// vocabulary and merges, added tokens, the Sequence/Split/ByteLevel pre-tokenizer and the ByteLevel
// decoder. Immutable after loading; every method is safe to call from many threads at once.
//
// Encoding never adds BOS/EOS or other post-processor tokens (Hugging Face's
// add_special_tokens=false). Three ways to encode, for the injection rules of recipe.md §6:
//   encode()               HF semantics: added-token spellings in the text become their tokens.
//   encode_plain()         the text is plain text: added-token spellings are ordinary BPE (use it for
//                          anything a user or a tool wrote).
//   encode_with_specials() explicit byte ranges are added tokens, everything else is plain text.
// Input that is not valid UTF-8 is encoded as its lossy decoding (each maximal invalid subpart
// becomes U+FFFD), see utf8.h. Long inputs can be encoded on a core::ThreadPool: the text is cut at
// added-token boundaries and at pre-tokenizer boundaries proven not to change the result.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_vocabulary.h"

namespace dsinfer::core {
class ThreadPool;
}

namespace dsinfer::tokenizer {

class Bpe;
class PreTokenizer;
struct TokenMapHolder;

struct EncodeOptions {
  core::ThreadPool* pool = nullptr;      // nullptr: only the calling thread
  size_t parallel_min_bytes = 64 * 1024;  // shorter inputs are encoded by the calling thread
  size_t chunk_bytes = 0;                 // target piece size for the pool; 0 picks one from the pool size
};

// A byte range [begin, end) of the text that holds one added token's exact spelling.
struct SpecialRange {
  size_t begin = 0;
  size_t end = 0;
};

class Tokenizer {
 public:
  // Loads a tokenizer.json. Throws core::Error naming the file and the field that is wrong or
  // unsupported.
  static Tokenizer from_file(const std::string& path);
  // The same from the file's text; `source` names it in error messages.
  static Tokenizer from_json_text(std::string_view json_text, std::string_view source = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  std::vector<int32_t> encode_plain(std::string_view text, const EncodeOptions& options = {}) const;
  // `specials` must be ascending, non-overlapping and inside the text; each must spell an added
  // token exactly (special or not). Throws core::Error naming the first bad range.
  std::vector<int32_t> encode_with_specials(std::string_view text, std::span<const SpecialRange> specials,
                                            const EncodeOptions& options = {}) const;
  // Encodes many texts (plain or with added tokens), in parallel on `options.pool` if given.
  std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string_view> texts, bool added_tokens,
                                                 const EncodeOptions& options = {}) const;

  // Hugging Face decode: the bytes of every id, concatenated, lossy-decoded as UTF-8. Ids with no
  // token (negative, past the end, or gaps) are skipped, as Hugging Face skips them;
  // skip_special_tokens also skips added tokens with special=true.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // The raw bytes one id decodes to (may be part of a UTF-8 character); empty for an unknown id.
  std::string_view token_bytes(int32_t id) const;
  // The token's spelling in the file (vocabulary tokens in the ByteLevel alphabet, e.g. "Ġhello";
  // added tokens as written), or nullopt.
  std::optional<std::string_view> id_to_token(int32_t id) const;
  // Added tokens first, then the vocabulary, as Hugging Face looks it up.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The id of an added token by its content, or nullopt.
  std::optional<int32_t> added_token_id(std::string_view content) const;
  bool is_special(int32_t id) const;
  bool is_known(int32_t id) const { return id >= 0 && id < vocab_size() && known_[id]; }
  // One more than the largest id (vocabulary or added token).
  int32_t vocab_size() const { return static_cast<int32_t>(known_.size()); }
  const std::vector<AddedToken>& added_tokens() const { return added_.tokens(); }
  // Whether long plain text can be cut for the pool (the pre-tokenizer is the DeepSeek one).
  bool has_cut_points() const;

 private:
  Tokenizer();
  void build_units(std::string_view text, bool added_tokens, std::vector<Segment>& out) const;
  std::vector<int32_t> run_units(std::string_view text, const std::vector<Segment>& segments,
                                 const EncodeOptions& options) const;
  void encode_plain_into(std::string_view text, std::vector<int32_t>& out) const;

  std::unique_ptr<TokenMapHolder> vocab_;
  std::unique_ptr<Bpe> bpe_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  AddedVocabulary added_;
  std::vector<char> known_;           // per id: has a token
  std::vector<char> special_;         // per id: special added token
  std::vector<uint32_t> bytes_off_;   // per id + 1: offsets into bytes_
  std::string bytes_;                 // decoded bytes of every id, concatenated
  std::vector<uint32_t> spelling_off_;
  std::string spellings_;
};

}  // namespace dsinfer::tokenizer
