// Incremental decoder for a custom tool call's arguments: the model writes {"input": "<JSON string>"} and
// the Responses protocol streams the decoded string. Arguments that do not start that way pass through
// unchanged; text after the closing quote is ignored.
#pragma once

#include <string>
#include <string_view>

namespace dsinfer::recipe::stream {

class CustomToolInputDecoder {
 public:
  // Decoded text available after this piece (incomplete escapes and prefixes are held back).
  std::string feed(std::string_view piece);
  // End of the arguments: anything held back, unchanged.
  std::string finish();

 private:
  enum class State { kPrefix, kValue, kPassthrough, kDone };
  void feed_prefix(char c, std::string& out);
  void feed_value(char c, std::string& out);

  State state_ = State::kPrefix;
  std::string held_;   // prefix text or an escape sequence in progress
  size_t part_ = 0;    // which of `{`, `"input"`, `:`, `"` is being matched
  size_t offset_ = 0;  // position inside that part
};

}  // namespace dsinfer::recipe::stream
