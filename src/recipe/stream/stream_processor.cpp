#include "recipe/stream/stream_processor.h"

namespace dsinfer::recipe::stream {

InferenceChunk InferenceChunk::ready(int64_t prompt_tokens, int64_t cache_hit_tokens,
                                     std::optional<std::string> fingerprint) {
  InferenceChunk c;
  c.kind = Kind::kReady;
  c.prompt_usage = {prompt_tokens, cache_hit_tokens};
  c.system_fingerprint = std::move(fingerprint);
  return c;
}

InferenceChunk InferenceChunk::text_chunk(std::string text, int64_t content_tokens) {
  InferenceChunk c;
  c.kind = Kind::kText;
  c.text = std::move(text);
  c.content_tokens = content_tokens;
  return c;
}

InferenceChunk InferenceChunk::token(int32_t id) {
  InferenceChunk c;
  c.kind = Kind::kToken;
  c.token_id = id;
  return c;
}

InferenceChunk InferenceChunk::finished(InferenceFinish reason) {
  InferenceChunk c;
  c.kind = Kind::kFinish;
  c.finish = reason;
  return c;
}

StreamProcessor::StreamProcessor(std::unique_ptr<ChunkGenerator> generator, const ParsingOptions& options,
                                 ProcessorOptions processor_options)
    : generator_(std::move(generator)), machine_(options, processor_options.label_scheme) {}

void StreamProcessor::emit(const OutputChunk& chunk, std::vector<StreamEvent>& events) {
  for (auto& e : generator_->generate(chunk)) events.push_back(std::move(e));
}

void StreamProcessor::start_if_needed(std::vector<StreamEvent>& events) {
  if (started_) return;
  started_ = true;
  OutputChunk start;
  start.kind = OutputChunk::Kind::kStart;
  start.prompt_usage = prompt_usage_;
  emit(start, events);
}

std::vector<StreamEvent> StreamProcessor::push(const InferenceChunk& chunk) {
  std::vector<StreamEvent> events;
  if (done_) return events;
  switch (chunk.kind) {
    case InferenceChunk::Kind::kReady:
      // Only the first Ready counts; it supplies the prompt usage and fingerprint of the start event.
      if (!started_) {
        prompt_usage_ = chunk.prompt_usage;
        started_ = true;
        OutputChunk start;
        start.kind = OutputChunk::Kind::kStart;
        start.prompt_usage = prompt_usage_;
        start.system_fingerprint = chunk.system_fingerprint;
        emit(start, events);
      }
      return events;
    case InferenceChunk::Kind::kFinish:
      backend_finish_ = chunk.finish;
      return tail();
    case InferenceChunk::Kind::kText:
      return consume(chunk.text, chunk.content_tokens);
    case InferenceChunk::Kind::kToken: {
      if (!decoder_) {
        done_ = true;
        throw StreamError("a token chunk reached the stream processor without a tokenizer");
      }
      token_buffer_.push_back(chunk.token_id);
      const std::string text = decode_buffered();
      // Wait while the ids decode to nothing (unknown ids) or end inside a multi-token character.
      static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
      if (text.empty() || (text.size() >= 3 && std::string_view(text).substr(text.size() - 3) == kReplacement))
        return events;
      const int64_t count = static_cast<int64_t>(token_buffer_.size());
      token_buffer_.clear();
      return consume(text, count);
    }
  }
  return events;
}

std::vector<StreamEvent> StreamProcessor::push_tokens(std::span<const int32_t> ids) {
  std::vector<StreamEvent> events;
  for (const int32_t id : ids) {
    for (auto& e : push(InferenceChunk::token(id))) events.push_back(std::move(e));
  }
  return events;
}

std::vector<StreamEvent> StreamProcessor::finish() {
  if (done_) return {};
  return tail();
}

std::vector<StreamEvent> StreamProcessor::consume(const std::string& text, int64_t tokens) {
  std::vector<StreamEvent> events;
  start_if_needed(events);
  completion_usage_.completion_tokens += tokens;
  const auto segments = machine_.feed(text);
  chunks_.push_back(text);
  apply(segments, events);
  if (has_stop_text_) {
    stop_sequence_ = std::move(stop_text_);
    stop_text_.clear();
    has_stop_text_ = false;
    for (auto& e : tail()) events.push_back(std::move(e));
  }
  return events;
}

std::string StreamProcessor::decode_buffered() {
  try {
    return decoder_(token_buffer_);
  } catch (const std::exception& e) {
    done_ = true;
    throw StreamError(core::str_cat("decoding output tokens failed: ", e.what()));
  }
}

std::vector<StreamEvent> StreamProcessor::tail() {
  std::vector<StreamEvent> events;
  // Ids still waiting at the end (a character cut off by the length limit, or unknown ids) are output
  // too: they count as completion tokens and an incomplete character becomes U+FFFD, as vLLM does.
  if (!token_buffer_.empty() && decoder_) {
    const std::string text = decode_buffered();
    const auto count = static_cast<int64_t>(token_buffer_.size());
    token_buffer_.clear();
    if (text.empty()) {
      completion_usage_.completion_tokens += count;
    } else {
      events = consume(text, count);
      if (done_) return events;  // the text completed a stop sequence: consume() already finished
    }
  }
  done_ = true;
  start_if_needed(events);
  apply(machine_.finish(), events);
  if (has_stop_text_) {  // parts of a stop sequence matched across chunks
    stop_sequence_ = stop_sequence_.value_or("") + stop_text_;
    has_stop_text_ = false;
  }
  OutputChunk finish;
  finish.kind = OutputChunk::Kind::kFinish;
  if (stop_sequence_) {
    finish.finish_reason = FinishReason::kStopSequence;
  } else if (backend_finish_) {
    switch (*backend_finish_) {
      case InferenceFinish::kStop:
        finish.finish_reason = has_tool_calls_ ? FinishReason::kToolCalls : FinishReason::kStop;
        break;
      case InferenceFinish::kLength: finish.finish_reason = FinishReason::kLength; break;
      case InferenceFinish::kContentFilter: finish.finish_reason = FinishReason::kContentFilter; break;
    }
  } else {
    finish.finish_reason = FinishReason::kEndOfStream;
  }
  finish.stop_sequence = stop_sequence_;
  finish.completion_usage = completion_usage_;
  emit(finish, events);
  return events;
}

// Segments with the same action merge; when the action changes the pending one is applied to the queued
// text: whole chunks first (one output each), then a prefix of the front chunk. The last action of a feed
// takes whole chunks only, so output pieces never cross input chunk boundaries.
void StreamProcessor::apply(const std::vector<ActionSegment>& segments, std::vector<StreamEvent>& events) {
  for (const auto& segment : segments) {
    if (pending_ && pending_->action == segment.action) {
      pending_->len += segment.len;
      continue;
    }
    if (pending_) {
      apply_whole_chunks(*pending_, events);
      if (pending_->len > 0) pop(*pending_, events);
    }
    pending_ = segment;
  }
  if (pending_) apply_whole_chunks(*pending_, events);
  if (head_ > 64 && head_ * 2 > chunks_.size()) {
    chunks_.erase(chunks_.begin(), chunks_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
}

void StreamProcessor::apply_whole_chunks(ActionSegment& pending, std::vector<StreamEvent>& events) {
  while (head_ < chunks_.size()) {
    const size_t front = chunks_[head_].size();
    if (front > pending.len) return;
    pop({pending.action, front}, events);
    pending.len -= front;
  }
}

void StreamProcessor::pop(const ActionSegment& segment, std::vector<StreamEvent>& events) {
  if (head_ >= chunks_.size()) return;
  std::string piece;
  if (segment.len < chunks_[head_].size()) {
    piece = chunks_[head_].substr(0, segment.len);
    chunks_[head_].erase(0, segment.len);
  } else {
    piece = std::move(chunks_[head_]);
    ++head_;
  }
  const Action last = last_pop_;
  last_pop_ = segment.action;
  OutputChunk out;
  switch (segment.action.kind) {
    case ActionKind::kRaw:
      if (piece.empty()) return;
      out.kind = OutputChunk::Kind::kRaw;
      out.text = std::move(piece);
      break;
    case ActionKind::kReasoning:
      if (piece.empty()) return;
      out.kind = OutputChunk::Kind::kReasoning;
      out.text = std::move(piece);
      break;
    case ActionKind::kToSpace:
      out.kind = OutputChunk::Kind::kRaw;
      out.text = " ";
      break;
    case ActionKind::kSkip:
    case ActionKind::kSkipInvalid:
      return;
    case ActionKind::kStopSequence:
      stop_text_ += piece;
      has_stop_text_ = true;
      return;
    case ActionKind::kToolCallBegin:
      if (last.kind == ActionKind::kToolCallBegin) return;
      out.kind = OutputChunk::Kind::kToolCallBegin;
      break;
    case ActionKind::kToolName:
      tool_name_ += piece;
      return;
    case ActionKind::kToolNameEnd:
      if (last.kind == ActionKind::kToolNameEnd) return;
      has_tool_calls_ = true;
      out.kind = OutputChunk::Kind::kToolCall;
      out.text = std::move(tool_name_);
      tool_name_.clear();
      break;
    case ActionKind::kLabelArgs:
    case ActionKind::kArgsEnd:
      if (last == segment.action) return;  // a label split over pops is emitted once
      out.kind = OutputChunk::Kind::kToolArgumentsDelta;
      out.text = std::string(segment.action.text);
      break;
    case ActionKind::kRawArgs:
      if (piece.empty()) return;
      out.kind = OutputChunk::Kind::kToolArgumentsDelta;
      out.text = segment.action.string ? json_quote(piece, false) : std::move(piece);
      break;
    case ActionKind::kLabel:
      if (last == segment.action) return;
      out.kind = OutputChunk::Kind::kRaw;
      out.text = std::string(segment.action.text);
      break;
  }
  emit(out, events);
}

}  // namespace dsinfer::recipe::stream
