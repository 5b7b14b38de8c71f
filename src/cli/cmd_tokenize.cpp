// dsinfer tokenize: JSON lines in, JSON lines out. Encoding reads {"text": "..."} and writes
// {"ids": [...]} (no BOS added); --decode reads {"ids": [...]} and writes {"text": "..."}. A
// malformed line gets an {"error": "line N: ..."} line in its place, so output lines stay aligned
// with input lines; the exit status is 1 if any line failed.
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::cli {
namespace {

using nlohmann::json;

std::string encode_line(const tokenizer::Tokenizer& tok, const json& in, bool plain,
                        const tokenizer::EncodeOptions& options) {
  if (!in.is_object() || !in.contains("text") || !in["text"].is_string())
    throw core::Error("expected an object with a string \"text\"");
  const std::string text = in["text"].get<std::string>();
  const auto ids = plain ? tok.encode_plain(text, options) : tok.encode(text, options);
  return json{{"ids", ids}}.dump();
}

std::string decode_line(const tokenizer::Tokenizer& tok, const json& in, bool skip_special) {
  if (!in.is_object() || !in.contains("ids") || !in["ids"].is_array())
    throw core::Error("expected an object with an \"ids\" array");
  std::vector<int32_t> ids;
  ids.reserve(in["ids"].size());
  for (size_t i = 0; i < in["ids"].size(); ++i) {
    const json& v = in["ids"][i];
    if (!v.is_number_integer()) throw core::Error(core::str_cat("ids[", i, "] is not an integer: ", v.dump()));
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= tok.vocab_size() || !tok.is_known(static_cast<int32_t>(id)))
      throw core::Error(core::str_cat("ids[", i, "] = ", id, " is not a token of this tokenizer (ids 0..",
                                      tok.vocab_size() - 1, ")"));
    ids.push_back(static_cast<int32_t>(id));
  }
  return json{{"text", tok.decode(ids, skip_special)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

int run_tokenize(int argc, char** argv) {
  Args args("tokenize",
            "Encode or decode JSON lines on stdin with a tokenizer.json. Encoding reads {\"text\": ...} and writes\n"
            "{\"ids\": [...]} without BOS; --decode reads {\"ids\": [...]} and writes {\"text\": ...}.");
  args.option("tokenizer", "FILE", "tokenizer.json to use (required)");
  args.flag("decode", "decode ids to text instead of encoding text");
  args.flag("skip-special-tokens", "with --decode: drop special added tokens (BOS, EOS, image, ...)");
  args.flag("plain", "encode added-token spellings in the text as plain text (injection-safe)");
  args.option("threads", "N", "threads for segment-parallel encoding of long lines (0 = all cores)", "1");
  if (!args.parse(argc, argv)) return args.exit_code();
  if (!args.has("tokenizer")) {
    std::fprintf(stderr, "dsinfer tokenize: --tokenizer FILE is required\n%s", args.usage().c_str());
    return 2;
  }
  const bool decode = args.has("decode");
  if (args.has("skip-special-tokens") && !decode) {
    std::fprintf(stderr, "dsinfer tokenize: --skip-special-tokens only applies with --decode\n");
    return 2;
  }
  if (args.has("plain") && decode) {
    std::fprintf(stderr, "dsinfer tokenize: --plain only applies to encoding\n");
    return 2;
  }
  const auto tok = tokenizer::Tokenizer::from_file(args.get("tokenizer"));
  const int64_t threads = args.get_int("threads");
  std::unique_ptr<core::ThreadPool> pool;
  tokenizer::EncodeOptions options;
  if (threads != 1) {
    pool = std::make_unique<core::ThreadPool>(static_cast<int>(threads));
    options.pool = pool.get();
  }

  std::ios::sync_with_stdio(false);
  std::string line;
  int64_t line_no = 0;
  int64_t errors = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    std::string out;
    try {
      json in;
      try {
        in = json::parse(line);
      } catch (const json::exception& e) {
        throw core::Error(core::str_cat("not valid JSON: ", e.what()));
      }
      out = decode ? decode_line(tok, in, args.has("skip-special-tokens"))
                   : encode_line(tok, in, args.has("plain"), options);
    } catch (const std::exception& e) {
      ++errors;
      out = json{{"error", core::str_cat("line ", line_no, ": ", e.what())}}.dump(-1, ' ', false,
                                                                               json::error_handler_t::replace);
    }
    out.push_back('\n');
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);
  if (errors > 0) {
    std::fprintf(stderr, "dsinfer tokenize: %lld of %lld lines failed\n", static_cast<long long>(errors),
                 static_cast<long long>(line_no));
    return 1;
  }
  return 0;
}

}  // namespace
DSINFER_COMMAND("tokenize", "encode/decode JSON lines with a tokenizer.json", run_tokenize);
}  // namespace dsinfer::cli
