// StreamProcessor (spec §5.1, §5.3): feed it what the engine produces for one request — token ids or text
// chunks — and it returns protocol events as they become known; at the end it has the non-streaming body.
//
//   auto gen = stream::make_chunk_generator(req.protocol, stream::generator_options_for(req, id, model));
//   stream::StreamProcessor p(std::move(gen), req.request.parsing_options);
//   p.set_token_decoder(decoder);                       // for token ids
//   send(p.push(InferenceChunk::ready(prompt_tokens, cached_tokens)));
//   for each engine event: send(p.push_tokens(ids));   // SSE: stream::sse_frame(event)
//   send(p.push(InferenceChunk::finish(InferenceFinish::kStop)));   // or p.finish() on end of input
//   body = p.response();                                // non-streaming JSON
//
// Not thread-safe: one processor per request, fed from one thread at a time.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "recipe/stream/chunk_generator.h"
#include "recipe/stream/events.h"
#include "recipe/stream/state_machine.h"

namespace dsinfer::recipe::stream {

// Why the backend stopped. The backend must not forward EOS as a token: it sends Finish(kStop) instead.
enum class InferenceFinish { kStop, kLength, kContentFilter };

struct InferenceChunk {
  enum class Kind { kReady, kText, kToken, kFinish };
  Kind kind = Kind::kText;
  std::optional<std::string> system_fingerprint;  // kReady
  PromptUsage prompt_usage;                        // kReady
  std::string text;                                // kText
  int64_t content_tokens = 0;                      // kText: how many tokens the text is
  int32_t token_id = 0;                            // kToken
  InferenceFinish finish = InferenceFinish::kStop; // kFinish

  static InferenceChunk ready(int64_t prompt_tokens, int64_t cache_hit_tokens,
                              std::optional<std::string> fingerprint = std::nullopt);
  static InferenceChunk text_chunk(std::string text, int64_t content_tokens);
  static InferenceChunk token(int32_t id);
  static InferenceChunk finished(InferenceFinish reason);
};

// Decodes ids to text keeping special tokens (they drive parsing): tokenizer.decode(ids, skip_special=false).
using TokenDecoder = std::function<std::string(std::span<const int32_t> ids)>;

class StreamError : public core::Error {
 public:
  using core::Error::Error;
};

struct ProcessorOptions {
  LabelScheme label_scheme = LabelScheme::kQuotedNames;
};

class StreamProcessor {
 public:
  StreamProcessor(std::unique_ptr<ChunkGenerator> generator, const ParsingOptions& options,
                  ProcessorOptions processor_options = {});

  void set_token_decoder(TokenDecoder decoder) { decoder_ = std::move(decoder); }

  // One backend chunk. After the stream has ended (finish, stop sequence) further chunks yield nothing.
  // A token chunk without a decoder throws StreamError and ends the stream.
  std::vector<StreamEvent> push(const InferenceChunk& chunk);
  // Several token ids at once (an engine step may produce more than one).
  std::vector<StreamEvent> push_tokens(std::span<const int32_t> ids);
  // End of the source without a Finish chunk (finish reason end_of_stream).
  std::vector<StreamEvent> finish();

  bool finished() const { return done_; }
  // The non-streaming response body (complete once finished()).
  Json response() const { return generator_->response(); }
  // "data: [DONE]\n\n" for Chat, "" otherwise.
  std::string done_frame() const { return generator_->done_frame(); }
  const CompletionUsage& completion_usage() const { return completion_usage_; }

 private:
  std::vector<StreamEvent> consume(const std::string& text, int64_t tokens);
  std::vector<StreamEvent> tail();
  std::string decode_buffered();
  void start_if_needed(std::vector<StreamEvent>& events);
  void emit(const OutputChunk& chunk, std::vector<StreamEvent>& events);
  void apply(const std::vector<ActionSegment>& segments, std::vector<StreamEvent>& events);
  void apply_whole_chunks(ActionSegment& pending, std::vector<StreamEvent>& events);
  void pop(const ActionSegment& segment, std::vector<StreamEvent>& events);

  std::unique_ptr<ChunkGenerator> generator_;
  StateMachine machine_;
  TokenDecoder decoder_;
  std::vector<int32_t> token_buffer_;

  bool started_ = false;
  bool done_ = false;
  PromptUsage prompt_usage_;
  CompletionUsage completion_usage_;
  std::optional<InferenceFinish> backend_finish_;
  std::optional<std::string> stop_sequence_;

  // The stash: raw chunk text waiting for its actions, as a queue of pieces (front at head_).
  std::vector<std::string> chunks_;
  size_t head_ = 0;
  std::optional<ActionSegment> pending_;
  Action last_pop_ = Action{ActionKind::kSkip, InvalidKind::kNone, false, 0, {}};
  std::string tool_name_;
  std::string stop_text_;
  bool has_stop_text_ = false;
  bool has_tool_calls_ = false;
};

}  // namespace dsinfer::recipe::stream
