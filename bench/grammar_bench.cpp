// Structured output costs on the V4 tokenizer: grammar compile time per schema (JSON Schema -> grammar,
// no cache) and token-mask time per decoding step (median, p99) along a valid instance of each schema;
// the same for strict tool calls (the DSML tool-call grammar of two tools, tool_choice auto, over the
// vocabulary that keeps the DSML marker) along a V4 tool-call block. Masks three ways, interleaved per
// round: the full trie walk (no mask cache), the grammar's shared mask cache on its first request (a
// fresh cache), and on a later request (warm: what a cached schema meets). Then the cold walks: every
// kernel item met along the instance walked once on a fresh cache, in thread CPU ms (per walk; "wide"
// walks, whose entry keeps a bitmask because most of the vocabulary passes, are string positions;
// items that share a bounded repeat's walk cost no walk, derived ones a partial walk; with --walks-only
// also each item walked alone, as before walks were shared).
// Usage: bench_grammar [--walks-only] [path to the npm V3 base tokenizer.json] (default: the one
// scripts/setup.sh installs). --walks-only: only the cold walks' line per schema (for profiling them).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/earley_matcher.h"
#include "grammar/json_schema.h"
#include "grammar/mask_cache.h"
#include "grammar/token_matcher.h"
#include "grammar/tool_calls.h"
#include "tokenizer/deepseek_v4.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// This thread's CPU time in ms: what a walk costs whatever else the machine runs (it is shared).
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

struct Case {
  const char* name;
  const char* schema;
  const char* instance;
};

const Case kCases[] = {
    {"person", R"g({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0},"email":{"type":"string","format":"email"}},"required":["name","age"]})g",
     R"g({"name":"Ada Lovelace, Countess of Lovelace","age":36,"email":"ada@example.org"})g"},
    {"json_object", R"g({"type":"object"})g",
     R"g({"title":"A short note","body":"Structured output keeps the model on the schema.","n":[1,2,3]})g"},
    {"tree", R"g({"$defs":{"t":{"type":"object","properties":{"label":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/t"}}},"required":["label"]}},"$ref":"#/$defs/t"})g",
     R"g({"label":"root","children":[{"label":"left"},{"label":"right","children":[]}]})g"},
    {"api_event", R"g({"type":"object","properties":{"id":{"type":"string","format":"uuid"},"at":{"type":"string","format":"date-time"},"kind":{"enum":["created","updated","deleted"]},"payload":{"type":"object","additionalProperties":{"type":["string","number","boolean","null"]}},"tags":{"type":"array","items":{"type":"string","maxLength":16},"maxItems":8}},"required":["id","at","kind"]})g",
     R"g({"id":"123e4567-e89b-12d3-a456-426614174000","at":"2025-06-30T12:00:00Z","kind":"updated","payload":{"status":"ok","count":3},"tags":["a","b"]})g"},
    // bench/engine/structured_schema.json (dsinfer bench-serve --schema): bounded strings, where every
    // position is a new Earley item.
    {"bench_serve", R"g({"type":"object","properties":{"id":{"type":"string","format":"uuid"},"title":{"type":"string","maxLength":200},"tags":{"type":"array","items":{"type":"string","maxLength":40},"maxItems":8},"priority":{"type":"integer","minimum":0,"maximum":5},"status":{"enum":["open","closed","blocked"]},"notes":{"type":"array","items":{"type":"object","properties":{"author":{"type":"string"},"text":{"type":"string"}},"required":["author","text"],"additionalProperties":false}}},"required":["id","title","tags","priority","status","notes"],"additionalProperties":false})g",
     R"g({"id":"123e4567-e89b-12d3-a456-426614174000","title":"Quarterly review of the structured output engine and its token masks","tags":["grammar","masks"],"priority":2,"status":"open","notes":[{"author":"Ada","text":"Looks good."}]})g"},
    // The same schema with its bounded strings written nearly to their maxLength (197 and 38 characters):
    // positions down to the chains' bottoms.
    {"bench_long", R"g({"type":"object","properties":{"id":{"type":"string","format":"uuid"},"title":{"type":"string","maxLength":200},"tags":{"type":"array","items":{"type":"string","maxLength":40},"maxItems":8},"priority":{"type":"integer","minimum":0,"maximum":5},"status":{"enum":["open","closed","blocked"]},"notes":{"type":"array","items":{"type":"object","properties":{"author":{"type":"string"},"text":{"type":"string"}},"required":["author","text"],"additionalProperties":false}}},"required":["id","title","tags","priority","status","notes"],"additionalProperties":false})g",
     R"g({"id":"123e4567-e89b-12d3-a456-426614174000","title":"Quarterly review of the structured output engine and its token masks, with notes on cold schemas, bounded strings, shared walks between string positions, and what a new schema's first request costs","tags":["grammar-constrained decoding and masks"],"priority":2,"status":"open","notes":[]})g"},
};

// Mask time per step along `ids` with a fresh matcher; empty when a token is refused.
std::vector<double> mask_times(const std::shared_ptr<const dsinfer::grammar::Grammar>& g,
                               const std::shared_ptr<const dsinfer::grammar::Vocabulary>& vocab,
                               const std::vector<int32_t>& ids) {
  dsinfer::grammar::TokenMatcher m(g, vocab);
  dsinfer::grammar::TokenMask mask((vocab->size() + 31) / 32);
  std::vector<double> out;
  for (int32_t id : ids) {
    auto t = Clock::now();
    m.fill_mask(mask);
    out.push_back(ms_since(t));
    if (!m.accept_token(id)) return {};
  }
  return out;
}

bool walks_only = false;

// The cold cost the first request of a schema pays: each kernel item met along `ids` walked once on a
// fresh mask cache (what MaskCache::entry does for a new item), CPU ms per walk; 3 rounds.
void report_walks(const dsinfer::grammar::Grammar& compiled,
                  const std::shared_ptr<const dsinfer::grammar::Vocabulary>& vocab, const std::vector<int32_t>& ids,
                  bool share = true) {
  using namespace dsinfer::grammar;
  std::vector<double> per_walk, wide_walk, per_schema;
  size_t items = 0, walks = 0, derived = 0;
  for (int round = 0; round < 3; ++round) {
    Grammar fresh = compiled;
    fresh.mask_cache = std::make_shared<MaskCache>(fresh, share);
    auto g = std::make_shared<const Grammar>(std::move(fresh));
    EarleyMatcher m(g);
    std::vector<uint64_t> seen;
    double total = 0;
    auto walk_new = [&](uint64_t key) {
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) return;
      seen.push_back(key);
      const size_t walked = g->mask_cache->stats().walks;
      const double t = thread_cpu_ms();
      const bool wide = !g->mask_cache->entry(g, vocab, key)->words.empty();
      const double ms = thread_cpu_ms() - t;
      total += ms;
      if (g->mask_cache->stats().walks == walked) return;  // another chain position's walk, shared
      per_walk.push_back(ms);
      if (wide) wide_walk.push_back(ms);
    };
    walk_new(MaskCache::kStartKey);
    for (int32_t id : ids) {
      if (!m.accept_bytes(vocab->bytes_of(id))) return;
      const size_t base = m.bytes_accepted();
      for (const auto& it : m.last_set()) {
        if (it.origin < base && m.next_symbol(it) != EarleyMatcher::kNone) walk_new(MaskCache::item_key(it.prod, it.dot));
      }
    }
    items = seen.size();
    walks = g->mask_cache->stats().walks;
    derived = g->mask_cache->stats().derived;
    per_schema.push_back(total);
  }
  // Wide: entries kept as a bitmask (most of the vocabulary accepted: string positions), the costly walks.
  const size_t wide = wide_walk.size() / 3;
  if (wide_walk.empty()) wide_walk.push_back(0);
  if (per_walk.empty()) per_walk.push_back(0);
  std::printf("  cold walks%s: %zu items, %zu walks per request (%zu wide, %zu derived from another position's), CPU ms"
              " per walk median / p99 / max %.2f / %.2f / %.2f, wide median %.2f; per request (median) %.1f ms\n",
              share ? "" : ", each item alone", items, walks, wide, derived, percentile(per_walk, 0.5),
              percentile(per_walk, 0.99), percentile(per_walk, 1.0), percentile(wide_walk, 0.5), percentile(per_schema, 0.5));
}

// Prints the three ways' mask times for one grammar (rounds interleaved); false when a token is refused.
bool report_masks(const char* name, double compile_ms, const dsinfer::grammar::Grammar& compiled,
                  const std::shared_ptr<const dsinfer::grammar::Vocabulary>& vocab, const std::vector<int32_t>& ids,
                  const char* extra = "") {
  using dsinfer::grammar::Grammar;
  using dsinfer::grammar::MaskCache;
  if (walks_only) {
    std::printf("%s\n", name);
    report_walks(compiled, vocab, ids, false);
    report_walks(compiled, vocab, ids);
    return true;
  }
  constexpr int kRounds = 3;
  Grammar plain = compiled;
  plain.mask_cache = nullptr;
  auto full = std::make_shared<const Grammar>(std::move(plain));
  std::vector<double> full_ms, first_ms, warm_ms, analysis_ms;
  MaskCache::Stats stats;
  for (int round = 0; round < kRounds; ++round) {
    Grammar fresh = compiled;
    auto t = Clock::now();
    fresh.mask_cache = std::make_shared<MaskCache>(fresh);
    analysis_ms.push_back(ms_since(t));
    auto cached = std::make_shared<const Grammar>(std::move(fresh));
    std::vector<double> a = mask_times(full, vocab, ids), b = mask_times(cached, vocab, ids),
                        c = mask_times(cached, vocab, ids);
    if (a.empty() || b.empty() || c.empty()) {
      std::fprintf(stderr, "%s: a token was refused\n", name);
      return false;
    }
    full_ms.insert(full_ms.end(), a.begin(), a.end());
    first_ms.insert(first_ms.end(), b.begin(), b.end());
    warm_ms.insert(warm_ms.end(), c.begin(), c.end());
    stats = cached->mask_cache->stats();
  }
  auto line = [](const std::vector<double>& v) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.2f / %.2f / %.2f", percentile(v, 0.5), percentile(v, 0.99), percentile(v, 1.0));
    return std::string(buf);
  };
  std::printf("%-12s compile median %.3f ms (of which mask-cache analysis %.3f ms), %zu steps x %d rounds%s\n"
              "  mask median / p99 / max ms: full walk %s | cached, first request %s | cached, warm %s\n"
              "  cache: %zu entries, %.0f KiB, %zu walks\n",
              name, compile_ms, percentile(analysis_ms, 0.5), ids.size(), kRounds, extra, line(full_ms).c_str(),
              line(first_ms).c_str(), line(warm_ms).c_str(), stats.entries, static_cast<double>(stats.bytes) / 1024.0,
              stats.walks);
  report_walks(compiled, vocab, ids);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dsinfer;
  int arg = 1;
  walks_only = argc > arg && std::string(argv[arg]) == "--walks-only";
  if (walks_only) ++arg;
  const std::string base_path = argc > arg ? argv[arg] : std::string(tokenizer::kNpmV3BasePath);
  std::ifstream in(base_path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s (run scripts/setup.sh, or pass the path)\n", base_path.c_str());
    return 1;
  }
  std::ostringstream text;
  text << in.rdbuf();
  auto tok = tokenizer::Tokenizer::from_json_text(
      tokenizer::build_deepseek_tokenizer_json(text.str(), tokenizer::DeepseekVersion::kV4, base_path), "v4");
  auto t0 = Clock::now();
  auto vocab = grammar::Vocabulary::from_tokenizer(tok, {1});
  std::printf("vocabulary %d tokens, trie %zu nodes, built in %.1f ms\n", vocab->size(), vocab->nodes().size(),
              ms_since(t0));
  for (const Case& c : kCases) {
    const Json schema = Json::parse(c.schema);
    std::vector<double> compile_ms;
    grammar::Grammar g;
    for (int rep = 0; rep < 20; ++rep) {
      auto t = Clock::now();
      g = grammar::json_schema_grammar(schema);
      compile_ms.push_back(ms_since(t));
    }
    if (!report_masks(c.name, percentile(compile_ms, 0.5), g, vocab, tok.encode_plain(c.instance))) return 1;
  }
  // Strict tools: text, then a block of two calls.
  {
    const std::vector<grammar::ToolSpec> tools = {
        {"get_weather", Json::parse(R"g({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":14},"unit":{"enum":["C","F"]}},"required":["city"]})g")},
        {"create_event", Json::parse(R"g({"type":"object","properties":{"title":{"type":"string"},"when":{"type":"string","format":"date-time"},"attendees":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},"email":{"type":"string","format":"email"}},"required":["name"]}}},"required":["title","when"]})g")}};
    grammar::ToolCallGrammarOptions o;
    o.tags = {"tool_calls", "invoke", "parameter"};
    std::vector<double> compile_ms;
    grammar::Grammar g;
    for (int rep = 0; rep < 20; ++rep) {
      auto t = Clock::now();
      g = grammar::tool_call_grammar(tools, o);
      compile_ms.push_back(ms_since(t));
    }
    t0 = Clock::now();
    auto tool_vocab = grammar::Vocabulary::from_tokenizer(tok, {1}, {grammar::kDsmlMarker, grammar::kThinkEndText});
    const double vocab_ms = ms_since(t0);
    const std::string d = grammar::kDsmlMarker;
    const std::string p = "<" + d + "parameter name=\"", pe = "</" + d + "parameter>";
    const std::string text = "Let me look that up.\n\n<" + d + "tool_calls>\n<" + d + "invoke name=\"get_weather\">\n" + p +
                             "city\" string=\"true\">Paris" + pe + "\n" + p + "days\" string=\"false\">3" + pe + "\n</" + d +
                             "invoke>\n<" + d + "invoke name=\"create_event\">\n" + p + "title\" string=\"true\">Lunch with Ada" + pe +
                             "\n" + p + "when\" string=\"true\">2026-12-01T12:30:00Z" + pe + "\n" + p +
                             "attendees\" string=\"false\">[{\"name\": \"Ada\", \"email\": \"ada@example.org\"}]" + pe + "\n</" + d +
                             "invoke>\n</" + d + "tool_calls>";
    std::vector<tokenizer::SpecialRange> specials;
    for (size_t at = text.find(d); at != std::string::npos; at = text.find(d, at + 1)) specials.push_back({at, at + d.size()});
    char extra[96];
    std::snprintf(extra, sizeof extra, " (vocabulary with the DSML marker built in %.1f ms)", vocab_ms);
    if (!report_masks("strict_tools", percentile(compile_ms, 0.5), g, tool_vocab, tok.encode_with_specials(text, specials),
                      extra)) {
      return 1;
    }
  }
  return 0;
}
