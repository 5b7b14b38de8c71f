// dsinfer bench-tokenizer: encode throughput of the tokenizer on a few MB of mixed English, Chinese
// and source code, generated deterministically (or read from --text), single-threaded and with
// segment parallelism. bench/tokenizer/run.sh runs it next to Hugging Face tokenizers (Node) on the
// same text and prints the ratio.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::cli {
namespace {

// splitmix64: fixed seed, so the text is the same on every machine.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
  // Zipf-like: small indices much more often, like word frequencies.
  size_t skewed(size_t n) {
    const double u = static_cast<double>(next() >> 11) / 9007199254740992.0;
    return std::min(n - 1, static_cast<size_t>(static_cast<double>(n) * u * u * u));
  }
};

const std::vector<std::string>& english_words() {
  static const std::vector<std::string> words = [] {
    std::vector<std::string> w;
    std::istringstream in(
        "the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
        "you were her all she there would their we him been has when who will more no if out so said what up its "
        "about into than them can only other new some could time these two may then do first any my now such like "
        "our over man me even most made after also did many before must through back years where much your way well "
        "down should because each just those people how too little state good very make world still own see men "
        "work long get here between both life being under never day same another know while last might us great old "
        "year off come since against go came right used take three model token server request cache memory layer "
        "attention expert weight vector matrix kernel thread batch stream decode prefill latency throughput "
        "inference tokenizer sequence context window compression benchmark performance distributed cluster network "
        "protocol response function variable structure algorithm implementation interface configuration parameter "
        "international understanding responsibility transformation characteristics");
    std::string s;
    while (in >> s) w.push_back(s);
    return w;
  }();
  return words;
}

// Common Chinese characters and a few two-character words, in rough frequency order.
const std::vector<std::string>& chinese_units() {
  static const std::vector<std::string> units = [] {
    std::vector<std::string> u;
    const std::string chars =
        "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学"
        "法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天"
        "政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者"
        "最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期"
        "根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受"
        "联什认六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话"
        "米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半"
        "模型服务器请求缓存推理计算数据语言测试分词";
    for (size_t i = 0; i < chars.size(); i += 3) u.push_back(chars.substr(i, 3));
    for (const char* w : {"我们", "中国", "可以", "这个", "没有", "一个", "他们", "因为", "所以", "但是", "如果", "已经",
                          "模型", "推理", "服务", "数据", "性能", "系统", "问题", "时间"})
      u.push_back(w);
    return u;
  }();
  return units;
}

std::string identifier(Rng& rng) {
  const auto& w = english_words();
  std::string id = w[rng.skewed(w.size())];
  const size_t parts = 1 + rng.below(3);
  for (size_t i = 1; i < parts; ++i) {
    std::string p = w[rng.skewed(w.size())];
    if (rng.below(2)) {
      id += '_';
      id += p;
    } else {
      p[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(p[0])));
      id += p;
    }
  }
  return id;
}

void english_paragraph(Rng& rng, std::string& out) {
  const auto& w = english_words();
  const size_t sentences = 2 + rng.below(5);
  for (size_t s = 0; s < sentences; ++s) {
    const size_t n = 6 + rng.below(16);
    for (size_t i = 0; i < n; ++i) {
      std::string word = w[rng.skewed(w.size())];
      if (i == 0) word[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(word[0])));
      if (rng.below(25) == 0) word = std::to_string(rng.below(100000));
      out += word;
      if (i + 1 < n) out += rng.below(12) == 0 ? ", " : " ";
    }
    const char* ends[] = {". ", ". ", ". ", "? ", "! "};
    out += ends[rng.below(5)];
  }
  out.pop_back();
}

void chinese_paragraph(Rng& rng, std::string& out) {
  const auto& u = chinese_units();
  const size_t sentences = 2 + rng.below(4);
  for (size_t s = 0; s < sentences; ++s) {
    const size_t n = 8 + rng.below(24);
    for (size_t i = 0; i < n; ++i) {
      out += u[rng.skewed(u.size())];
      if (rng.below(40) == 0) out += english_words()[rng.skewed(english_words().size())];
      if (rng.below(60) == 0) out += std::to_string(rng.below(10000));
      if (i + 1 < n && rng.below(10) == 0) out += "，";
    }
    out += rng.below(6) == 0 ? "？" : "。";
  }
}

// Appends the pieces in order; each piece is produced by the caller's lambda so that the random
// draws happen left to right (argument evaluation order is unspecified in C++).
template <typename... Parts>
void emit(std::string& out, Parts&&... parts) {
  ((out += parts()), ...);  // a fold over the comma operator runs left to right
}

void code_paragraph(Rng& rng, std::string& out) {
  const auto& words = english_words();
  auto id = [&] { return identifier(rng); };
  auto lit = [](const char* s) { return [s] { return std::string(s); }; };
  auto num = [&](size_t below) { return [&rng, below] { return std::to_string(rng.below(below)); }; };
  const size_t lines = 3 + rng.below(10);
  const int style = static_cast<int>(rng.below(3));
  if (style == 0) emit(out, lit("def "), id, lit("("), id, lit(", "), id, lit("):\n"));
  else if (style == 1) emit(out, lit("static int "), id, lit("(const std::vector<int>& "), id, lit(") {\n"));
  else out += "{\n";
  const auto indent = lit(style == 0 ? "    " : "  ");
  for (size_t i = 0; i < lines; ++i) {
    switch (rng.below(6)) {
      case 0: emit(out, indent, id, lit(" = "), id, lit("("), num(1000), lit(")")); break;
      case 1: emit(out, indent, lit("for (int i = 0; i < "), id, lit(".size(); ++i) "), id, lit("[i] += 1;")); break;
      case 2: emit(out, indent, lit("// "), [&] { return words[rng.skewed(words.size())]; }, lit(" "), id); break;
      case 3: emit(out, indent, lit("\""), id, lit("\": "), num(100000), lit(",")); break;
      case 4: emit(out, indent, lit("if ("), id, lit(" != nullptr && "), id, lit(" >= 0x"), num(4096), lit(") {")); break;
      default: emit(out, indent, lit("return "), id, lit(" * "), num(64), lit(";")); break;
    }
    out += "\n";
  }
  if (style != 0) out += "}\n";
}

std::string mixed_text(size_t bytes) {
  Rng rng{20260101};
  std::string out;
  out.reserve(bytes + 4096);
  while (out.size() < bytes) {
    const size_t kind = rng.below(20);
    if (kind < 9) english_paragraph(rng, out);
    else if (kind < 15) chinese_paragraph(rng, out);
    else code_paragraph(rng, out);
    out += "\n\n";
  }
  // Cut at a character boundary.
  size_t end = bytes;
  while (end > 0 && (static_cast<unsigned char>(out[end]) & 0xC0) == 0x80) --end;
  out.resize(end);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_bench_tokenizer(int argc, char** argv) {
  Args args("bench-tokenizer",
            "Encode throughput (MB/s) on mixed English/Chinese/code text, one thread and with segment parallelism.");
  args.option("tokenizer", "FILE", "tokenizer.json (required)");
  args.option("text", "FILE", "encode this file instead of generated text");
  args.option("mb", "N", "size of the generated text in MB", "4");
  args.option("write-text", "FILE", "write the text that is benchmarked to FILE (for other tokenizers)");
  args.option("threads", "N", "threads for the parallel run (0 = all cores)", "0");
  args.option("repeat", "N", "timed runs per configuration (the median is reported)", "5");
  if (!args.parse(argc, argv)) return args.exit_code();
  if (!args.has("tokenizer")) {
    std::fprintf(stderr, "dsinfer bench-tokenizer: --tokenizer FILE is required\n");
    return 2;
  }
  std::string text;
  if (args.has("text")) {
    std::ifstream in(args.get("text"), std::ios::binary);
    DSINFER_CHECK(in.good(), "cannot read ", args.get("text"));
    std::ostringstream s;
    s << in.rdbuf();
    text = s.str();
  } else {
    text = mixed_text(static_cast<size_t>(args.get_double("mb") * 1e6));
  }
  if (args.has("write-text")) {
    std::ofstream out(args.get("write-text"), std::ios::binary);
    out << text;
    DSINFER_CHECK(out.good(), "cannot write ", args.get("write-text"));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto tok = tokenizer::Tokenizer::from_file(args.get("tokenizer"));
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int repeat = static_cast<int>(std::max<int64_t>(1, args.get_int("repeat")));
  const double mb = static_cast<double>(text.size()) / 1e6;

  auto measure = [&](const tokenizer::EncodeOptions& options, size_t& n_ids) {
    n_ids = tok.encode(text, options).size();  // warm-up (fills the word caches)
    std::vector<double> rates;
    for (int r = 0; r < repeat; ++r) {
      const auto a = std::chrono::steady_clock::now();
      const auto ids = tok.encode(text, options);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
      DSINFER_CHECK(ids.size() == n_ids, "encode gave different lengths across runs");
      rates.push_back(mb / s);
    }
    return median(rates);
  };

  size_t ids_single = 0, ids_parallel = 0;
  const double single = measure({}, ids_single);
  int threads = static_cast<int>(args.get_int("threads"));
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  core::ThreadPool pool(threads);
  tokenizer::EncodeOptions parallel_options;
  parallel_options.pool = &pool;
  const double parallel = measure(parallel_options, ids_parallel);
  DSINFER_CHECK(ids_single == ids_parallel, "parallel encode gave ", ids_parallel, " ids, single-threaded ", ids_single);

  std::printf("text: %.2f MB, %zu ids (%.2f bytes/token); tokenizer load %.2f s\n", mb, ids_single,
              static_cast<double>(text.size()) / static_cast<double>(ids_single), load_s);
  std::printf("dsinfer encode, 1 thread:   %8.2f MB/s\n", single);
  std::printf("dsinfer encode, %2d threads: %8.2f MB/s  (segment parallel)\n", threads, parallel);
  return 0;
}

}  // namespace
DSINFER_COMMAND("bench-tokenizer", "benchmark tokenizer encode speed", run_bench_tokenizer);
}  // namespace dsinfer::cli
