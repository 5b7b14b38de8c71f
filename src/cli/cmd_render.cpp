// `dsinfer render`: what did my request become? Converts a protocol request (stdin) and prints the
// conversation, the V4/V4.1 prompt and its token ids.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "cli/args.h"
#include "cli/command.h"
#include "recipe/convert.h"
#include "recipe/prompt.h"
#include "recipe/prompt_encoder.h"
#include "recipe/tokenizer_loader.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::cli {
namespace {

int run_render(int argc, char** argv) {
  Args args("render", "Convert a Chat Completions / Responses / Messages request read from stdin and print the "
                      "conversation, the prompt and its token ids.");
  args.option("version", "v4|v41", "prompt template and tokenizer version", "v41");
  args.option("protocol", "chat|responses|messages", "request protocol (default: detect from the body)");
  args.option("tokenizer", "FILE",
              "tokenizer.json to encode with (default: the built one for --version); its spelling of the image "
              "token 129264 is the image placeholder (<｜deepseek_image｜> in the released V4.1 tokenizer.json)");
  args.option("npm-base", "FILE", "DeepSeek V3 tokenizer.json to build the tokenizer from when none is built");
  args.flag("no-ids", "print the prompt only; do not load a tokenizer (images: the recipe's <｜image｜>)");
  args.flag("json", "print one JSON object {protocol, request, prompt, image_sources, special_ranges, ids}");
  args.flag("single-pass", "also encode the 0.1.x way (added tokens matched anywhere) and report differences");
  if (!args.parse(argc, argv)) return args.exit_code();

  const std::string version_name = args.get("version");
  DSINFER_CHECK(version_name == "v4" || version_name == "v41", "--version must be v4 or v41, got '", version_name, "'");
  const recipe::PromptVersion version = version_name == "v4" ? recipe::PromptVersion::kV4 : recipe::PromptVersion::kV41;

  const std::string body_text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  recipe::Json body;
  try {
    body = recipe::parse_json(body_text);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsinfer render: stdin is not JSON: %s\n", e.what());
    return 2;
  }
  recipe::Protocol protocol = recipe::detect_protocol(body);
  if (auto p = args.get_optional("protocol")) {
    auto parsed = recipe::parse_protocol(*p);
    DSINFER_CHECK(parsed.has_value(), "--protocol must be chat, responses or messages, got '", *p, "'");
    protocol = *parsed;
  }

  recipe::ConvertedRequest converted;
  try {
    converted = recipe::convert_request(protocol, body);
  } catch (const recipe::ConversionError& e) {
    std::fprintf(stderr, "dsinfer render: the %s request is rejected (HTTP %d): %s\n", recipe::to_string(protocol),
                 e.http_status(), e.what());
    std::printf("%s\n", recipe::to_compact_json(e.http_body()).c_str());
    return 1;
  }
  // The tokenizer first: it decides how the image placeholder is spelled (the released V4.1 tokenizer.json
  // has <｜deepseek_image｜>, the recipe's tables <｜image｜>).
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (!args.has("no-ids")) {
    recipe::TokenizerSources sources;
    sources.file = args.get_optional("tokenizer");
    sources.npm_base = args.get_optional("npm-base");
    tok = recipe::load_deepseek_tokenizer(version_name, sources);
  }
  const recipe::RenderedPrompt rendered = recipe::render_conversation(
      converted.request.conversation, version, tok ? recipe::image_placeholder(*tok) : recipe::kImagePlaceholder);

  std::optional<std::vector<int32_t>> ids;
  std::optional<std::vector<int32_t>> single_pass;
  if (tok) {
    const recipe::PromptEncoder encoder(*tok);
    ids = encoder.encode(rendered);
    if (args.has("single-pass")) single_pass = encoder.encode_single_pass(rendered.prompt);
  }

  recipe::Json images = recipe::Json::array();
  for (const auto& s : rendered.image_sources) images.push_back(recipe::to_json(s));
  recipe::Json ranges = recipe::Json::array();
  for (const auto& r : rendered.special_ranges) ranges.push_back(recipe::Json::array({r.begin, r.end}));
  if (args.has("json")) {
    recipe::Json out = recipe::Json::object();
    out["protocol"] = recipe::to_string(protocol);
    out["request"] = recipe::to_json(converted.request);
    out["prompt"] = rendered.prompt;
    out["image_sources"] = images;
    out["special_ranges"] = ranges;
    out["ids"] = ids ? recipe::Json(*ids) : recipe::Json(nullptr);
    if (single_pass) out["single_pass_ids"] = *single_pass;
    std::printf("%s\n", recipe::to_compact_json(out).c_str());
    return 0;
  }
  std::printf("protocol: %s\n", recipe::to_string(protocol));
  std::printf("request: %s\n", recipe::to_compact_json(recipe::to_json(converted.request)).c_str());
  if (protocol == recipe::Protocol::kChatCompletions) std::printf("include_usage: %s\n", converted.include_usage ? "true" : "false");
  if (!converted.custom_tool_names.empty())
    std::printf("custom_tool_names: %s\n", recipe::to_compact_json(recipe::Json(converted.custom_tool_names)).c_str());
  std::printf("prompt (%s, %zu bytes, %zu control tokens): %s\n", version_name.c_str(), rendered.prompt.size(),
              rendered.special_ranges.size(), recipe::json_quote(rendered.prompt).c_str());
  std::printf("image_sources: %s\n", recipe::to_compact_json(images).c_str());
  if (ids) std::printf("ids (%zu): %s\n", ids->size(), recipe::to_compact_json(recipe::Json(*ids)).c_str());
  if (single_pass) {
    if (*single_pass == *ids) {
      std::printf("single-pass ids: identical\n");
    } else {
      std::printf("single-pass ids (%zu, DIFFERENT: client text spells control tokens): %s\n", single_pass->size(),
                  recipe::to_compact_json(recipe::Json(*single_pass)).c_str());
    }
  }
  return 0;
}

}  // namespace
DSINFER_COMMAND("render", "show the prompt and token ids a protocol request becomes", run_render);
}  // namespace dsinfer::cli
