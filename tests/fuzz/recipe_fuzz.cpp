// libFuzzer target over the recipe: request conversion and rendering from arbitrary bytes, encoding when a
// tokenizer is available, and the output parser plus all three protocol generators over arbitrary model
// output. Checks the invariants that must hold for any input, not only that nothing crashes.
//
// Input layout: byte 0 picks the protocol and options; the rest is split at the first 0xFF byte into the
// request body (JSON text) and model output (split into chunks at 0xFE bytes).
// Tokenizer: $DSINFER_FUZZ_TOKENIZER_DIR/<v4|v41>/tokenizer.json if set, else the built ones if present.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/convert.h"
#include "recipe/prompt.h"
#include "recipe/prompt_encoder.h"
#include "recipe/stream/stream_processor.h"
#include "recipe/tokenizer_loader.h"
#include "tokenizer/tokenizer.h"

using namespace dsinfer::recipe;

namespace {

[[noreturn]] void violated(const char* what) {
  std::fprintf(stderr, "recipe_fuzz invariant violated: %s\n", what);
  std::abort();
}

const dsinfer::tokenizer::Tokenizer* fuzz_tokenizer(PromptVersion version) {
  static std::unique_ptr<dsinfer::tokenizer::Tokenizer> loaded[2];
  static bool tried[2] = {false, false};
  const int i = version == PromptVersion::kV4 ? 0 : 1;
  if (!tried[i]) {
    tried[i] = true;
    try {
      TokenizerSources sources;
      if (const char* dir = std::getenv("DSINFER_FUZZ_TOKENIZER_DIR"))
        sources.file = std::string(dir) + "/" + to_string(version) + "/tokenizer.json";
      loaded[i] = load_deepseek_tokenizer(to_string(version), sources);
    } catch (const std::exception&) {
    }
  }
  return loaded[i].get();
}

void check_rendered(const RenderedPrompt& p) {
  size_t prev = 0;
  size_t images = 0;
  for (const auto& r : p.special_ranges) {
    if (r.begin < prev || r.end <= r.begin || r.end > p.prompt.size()) violated("special ranges ordered and inside");
    const std::string_view s(p.prompt.data() + r.begin, r.end - r.begin);
    if (s == kImagePlaceholder) ++images;
    prev = r.end;
  }
  if (images != p.image_sources.size()) violated("one placeholder range per image source");
  if (p.prompt.rfind(tokens::kBos, 0) != 0) violated("prompt starts with BOS");
}

void check_json_text(const Json& value) {
  // Whatever we emit must be valid JSON that reads back as the same value.
  const std::string text = to_compact_json(value);
  Json back;
  try {
    back = parse_json(text);
  } catch (const std::exception&) {
    violated("generated JSON does not parse");
  }
  if (to_compact_json(back) != text) violated("generated JSON does not round-trip");
}

void run_stream(const ConvertedRequest& req, std::string_view output, uint8_t flags) {
  for (Protocol protocol : {Protocol::kChatCompletions, Protocol::kResponses, Protocol::kMessages}) {
    ConvertedRequest r = req;
    r.protocol = protocol;
    stream::ProcessorOptions po;
    po.label_scheme = (flags & 0x40) ? stream::LabelScheme::kLegacy : stream::LabelScheme::kQuotedNames;
    stream::StreamProcessor p(stream::make_chunk_generator(protocol, stream::generator_options_for(r, "fuzz", "m")),
                              r.request.parsing_options, po);
    std::vector<stream::StreamEvent> events;
    auto take = [&](std::vector<stream::StreamEvent> e) {
      for (auto& x : e) events.push_back(std::move(x));
    };
    if (flags & 0x20) take(p.push(stream::InferenceChunk::ready(7, 3, std::string("fp"))));
    size_t start = 0;
    for (size_t i = 0; i <= output.size(); ++i) {
      if (i == output.size() || static_cast<uint8_t>(output[i]) == 0xFE) {
        take(p.push(stream::InferenceChunk::text_chunk(std::string(output.substr(start, i - start)), 1)));
        start = i + 1;
      }
    }
    if (flags & 0x10) take(p.push(stream::InferenceChunk::finished(stream::InferenceFinish::kLength)));
    else take(p.finish());
    if (!p.finished()) violated("processor finished");
    for (const auto& e : events) {
      check_json_text(e.data);
      (void)stream::sse_frame(e);
    }
    check_json_text(p.response());
  }
}

}  // namespace

// Tokenizers load before the first input, outside the per-input timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz_tokenizer(PromptVersion::kV4);
  fuzz_tokenizer(PromptVersion::kV41);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 64 * 1024) return 0;
  const uint8_t flags = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t split = rest.find('\xFF');
  const std::string_view body = rest.substr(0, split);
  const std::string_view output = split == std::string_view::npos ? std::string_view() : rest.substr(split + 1);
  const Protocol protocol = static_cast<Protocol>(flags % 3);
  ConversionOptions options;
  options.default_thinking_mode = (flags & 0x08) == 0;
  if (flags & 0x04) options.messages_web_search = WebSearchBehavior::kIgnore;

  ConvertedRequest converted;
  try {
    converted = convert_request_text(protocol, body, options);
  } catch (const ConversionError& e) {
    check_json_text(e.http_body());
    // Still exercise the parser with default options.
    ConvertedRequest fallback;
    fallback.request.parsing_options.reasoning_initial_stage = ReasoningStage::kStart;
    fallback.request.parsing_options.stop_sequences = {"STOP", "\n\n"};
    run_stream(fallback, output, flags);
    return 0;
  }
  check_json_text(to_json(converted.request));
  for (PromptVersion version : {PromptVersion::kV41, PromptVersion::kV4}) {
    const RenderedPrompt rendered = render_conversation(converted.request.conversation, version);
    check_rendered(rendered);
    if (const auto* tok = fuzz_tokenizer(version)) {
      const PromptEncoder encoder(*tok);
      const auto ids = encoder.encode(rendered);
      // Plain regions never produce control tokens, so the ids hold exactly the template's.
      size_t specials = 0;
      for (int32_t id : ids) {
        const auto text = tok->id_to_token(id);
        if (text && tok->added_token_id(*text) == id) ++specials;
      }
      if (specials != rendered.special_ranges.size()) violated("control tokens only from the template");
    }
  }
  try {
    (void)converted.request.resolve_max_tokens(100, (flags & 0x80) ? 4096 : 0);
  } catch (const ConversionError&) {
  }
  run_stream(converted, output, flags);
  return 0;
}
