// dsinfer logits: fp32 logits of every prompt position (or of the MTP head) as a NumPy .npy file,
// the contract the golden tests compare with the PyTorch reference (reference/run.py).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/common_flags.h"
#include "cli/command.h"
#include "core/error.h"
#include "kernels/cpu/targets.h"
#include "model/checkpoint.h"
#include "model/deepseek_v41/prefill.h"
#include "model/deepseek_v41/token_map.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/sequence_state.h"

namespace dsinfer::cli {
namespace {

namespace v4 = model::deepseek_v4;

std::vector<int32_t> read_ids(const std::string& spec) {
  std::string text = spec;
  if (!spec.empty() && spec[0] == '@') {
    std::ifstream in(spec.substr(1));
    DSINFER_CHECK(in.good(), "--prompt-ids: cannot read ", spec.substr(1));
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  std::string clean;
  for (char c : text) {
    if (c == '\n' || c == '\r' || c == ' ' || c == '\t') c = ',';
    clean += c;
  }
  // Drop empty items (trailing newline, double separators).
  std::string joined;
  std::stringstream items(clean);
  for (std::string item; std::getline(items, item, ',');) {
    if (item.empty()) continue;
    if (!joined.empty()) joined += ',';
    joined += item;
  }
  DSINFER_CHECK(!joined.empty(), "--prompt-ids: empty list");
  return parse_id_list(joined);
}

void write_npy(const std::string& path, const std::vector<float>& data, int64_t rows, int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  const size_t unpadded = 10 + header.size() + 1;
  header += std::string((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  DSINFER_CHECK(out.good(), "--out: cannot create ", path);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.write(reinterpret_cast<const char*>(&len), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
  DSINFER_CHECK(out.good(), "--out: write to ", path, " failed");
}

// --dump-kv: every vector the forward pass stored after its KV FP8 / indexer FP4 QDQ, decoded to fp32, so
// the golden tests can feed dsinfer's own codes to the reference (teacher forcing): a 1e-7 difference
// that moves a value across a rounding boundary then cannot avalanche. Files PREFIX.window.npy
// [layers·T, head_dim] (row l·T + p), PREFIX.comp<l>.npy [T/ratio, head_dim], PREFIX.key<l>.npy
// [T/4, index_dim] and, with --mtp, PREFIX.mtp_window.npy [T-1, head_dim].
class KvDump {
 public:
  KvDump(const v4::ModelShape& s, int64_t rows) : s_(s), rows_(rows) {
    window_.resize(static_cast<size_t>(s.n_layers * rows * s.head_dim));
  }
  // Window rows of positions [b, b+n) of `layer` (all backbone layers, or the MTP block's).
  void window(const v4::SequenceState& st, int64_t layer, int64_t b, int64_t n) {
    const v4::PositionRing& ring = st.layer(layer).window;
    const bool mtp = layer == s_.n_layers;
    float* dst = mtp ? mtp_window_.data() : window_.data() + layer * rows_ * s_.head_dim;
    for (int64_t p = b; p < b + n; ++p) {
      DSINFER_CHECK(ring.contains(p), "--dump-kv: window row ", p, " of layer ", layer, " is gone");
      s_.kv.decode(ring.row(p), dst + p * s_.head_dim);
    }
  }
  void window_all(const v4::SequenceState& st, int64_t b, int64_t n) {
    for (int64_t l = 0; l < s_.n_layers; ++l) window(st, l, b, n);
  }
  void begin_mtp(int64_t rows) { mtp_window_.assign(static_cast<size_t>(rows * s_.head_dim), 0.0f); }
  void write_main(const v4::SequenceState& st, const std::string& prefix, int64_t T) {
    write_npy(prefix + ".window.npy", window_, s_.n_layers * rows_, s_.head_dim);
    for (int64_t l = 0; l < s_.n_layers; ++l) {
      const v4::LayerShape& ls = s_.layers[l];
      if (!ls.compressed()) continue;
      const int64_t G = T / ls.ratio;
      std::vector<float> kv(static_cast<size_t>(G * s_.head_dim));
      std::vector<float> key(static_cast<size_t>(G * s_.index_dim));
      for (int64_t g = 0; g < G; ++g) {
        s_.kv.decode(st.entry_kv(ls.part, g), kv.data() + g * s_.head_dim);
        if (ls.csa()) s_.key.decode(st.entry_key(ls.part, g), key.data() + g * s_.index_dim);
      }
      write_npy(prefix + ".comp" + std::to_string(l) + ".npy", kv, G, s_.head_dim);
      if (ls.csa()) write_npy(prefix + ".key" + std::to_string(l) + ".npy", key, G, s_.index_dim);
    }
  }
  const std::vector<float>& mtp_window() const { return mtp_window_; }

 private:
  const v4::ModelShape& s_;
  int64_t rows_;
  std::vector<float> window_, mtp_window_;
};

v4::ModelOptions model_options(const ModelFlags& flags) {
  v4::ModelOptions opt;
  opt.numerics.mode = v4::parse_numerics_mode(flags.numerics);
  opt.numerics.kv_qdq = flags.kv_qdq;
  opt.threads = flags.threads;
  return opt;
}

// DeepseekV41ForCausalLM: model/deepseek_v41's sequence fed in one pass, in chunks or token by token
// (with rollback), and with --mtp / --mtp-out its DSpark draft head teacher-forced at every position
// at the end, from the taps the sequence kept.
int run_logits_v41(const Args& args, const ModelFlags& flags, const std::vector<int32_t>& ids) {
  DSINFER_CHECK(flags.numerics != "reference",
                "dsinfer logits: on a DeepseekV41ForCausalLM checkpoint --numerics reference is not implemented");
  const std::optional<std::string> dump_prefix = args.get_optional("dump-kv");
  const int64_t T = static_cast<int64_t>(ids.size());
  const bool mtp = args.has("mtp");
  const std::optional<std::string> mtp_out = args.get_optional("mtp-out");
  const std::optional<std::string> confidence_out = args.get_optional("confidence-out");
  DSINFER_CHECK(!confidence_out || mtp || mtp_out, "--confidence-out comes with the draft head: give --mtp or --mtp-out");
  int64_t chunk = args.get_int("chunk-size");
  const int64_t rollback = args.get_int("rollback");
  DSINFER_CHECK(chunk >= 0, "--chunk-size must be >= 0, got ", chunk);
  DSINFER_CHECK(rollback >= 0, "--rollback must be >= 0, got ", rollback);
  if (chunk == 0) chunk = T;
  const int64_t replay = args.get_int("decoder-replay");
  DSINFER_CHECK(replay >= 0, "--decoder-replay must be >= 0, got ", replay);
  DSINFER_CHECK(replay == 0 || (chunk == T && rollback == 0 && !mtp && !mtp_out),
                "--decoder-replay: one pass only (no --chunk-size, --rollback, --mtp, --mtp-out)");
  // With a replay only the last K rows have logits.
  const int64_t rows = replay > 0 ? std::min(T, replay) : T;
  DSINFER_CHECK(!(mtp && mtp_out), "--mtp and --mtp-out: give one (--mtp-out keeps the main logits in --out)");
  DSINFER_CHECK(!(mtp || mtp_out) || T >= 2, "--mtp needs at least 2 prompt tokens");
  const auto t0 = std::chrono::steady_clock::now();
  auto ck = model::Checkpoint::open(flags.dir);
  std::optional<model::deepseek_v41::EngramTokenMap> map;
  if (ck->config().engram) map = model::deepseek_v41::load_engram_token_map(flags.dir, ck->config());
  const auto t1 = std::chrono::steady_clock::now();
  model::deepseek_v41::PrefillOptions opt;
  opt.qdq = flags.kv_qdq;
  opt.double_accumulation = args.has("double-accumulation");
  opt.fast = flags.numerics == "fast";
  opt.decoder_replay_tokens = replay;
  const int64_t vocab = ck->config().vocab_size;
  std::mt19937 rng(static_cast<uint32_t>(args.get_int("seed")));
  std::uniform_int_distribution<int32_t> random_token(0, static_cast<int32_t>(vocab - 1));
  model::deepseek_v41::Sequence seq(*ck, map ? &*map : nullptr, opt);
  std::vector<float> logits;
  for (int64_t b = 0; b < T; b += chunk) {
    const std::vector<float> part =
        seq.forward(std::vector<int32_t>(ids.begin() + b, ids.begin() + std::min(T, b + chunk)), rows);
    logits.insert(logits.end(), part.begin(), part.end());
    if (rollback > 0) {
      const int64_t len = seq.length();
      std::vector<int32_t> junk(static_cast<size_t>(rollback));
      for (auto& t : junk) t = random_token(rng);
      seq.forward(junk);
      seq.truncate(len);
    }
  }
  std::vector<float> draft0, confidence;
  if (mtp || mtp_out) draft0 = seq.dspark_draft0(confidence_out ? &confidence : nullptr);
  const auto t2 = std::chrono::steady_clock::now();
  if (mtp) {
    write_npy(args.get("out"), draft0, T - 1, vocab);
  } else {
    write_npy(args.get("out"), logits, static_cast<int64_t>(logits.size()) / vocab, vocab);
  }
  if (mtp_out) write_npy(*mtp_out, draft0, T - 1, vocab);
  if (confidence_out) {
    write_npy(*confidence_out, confidence, T - 1, static_cast<int64_t>(confidence.size()) / (T - 1));
  }
  if (dump_prefix) {
    // V4's file layout: PREFIX.window.npy [layers·T, head_dim] (row l·T + p), PREFIX.comp<l>.npy
    // [T/ratio, head_dim] and PREFIX.key<l>.npy [T/ratio, index_head_dim] for every kv source l.
    const model::deepseek_v41::StoredKv kv = seq.stored_kv();
    const int64_t hd = ck->config().head_dim, ixd = ck->config().index_head_dim;
    std::vector<float> window;
    for (const auto& [l, w] : kv.window) {
      DSINFER_CHECK(static_cast<int64_t>(w.size()) == T * hd, "--dump-kv: layer ", l, " stored ", w.size() / hd,
                    " window rows, not ", T);
      window.insert(window.end(), w.begin(), w.end());
    }
    write_npy(*dump_prefix + ".window.npy", window, static_cast<int64_t>(window.size()) / hd, hd);
    for (const auto& [l, c] : kv.compressed)
      write_npy(*dump_prefix + ".comp" + std::to_string(l) + ".npy", c, static_cast<int64_t>(c.size()) / hd, hd);
    for (const auto& [l, k] : kv.index_keys)
      write_npy(*dump_prefix + ".key" + std::to_string(l) + ".npy", k, static_cast<int64_t>(k.size()) / ixd, ixd);
    // With the draft head, per stage s: PREFIX.ring<s>.npy [T, head_dim] (every position's ring entry)
    // and PREFIX.block<s>.npy [(T-1)·block, head_dim] (every round's block KV).
    if (mtp || mtp_out) {
      const model::deepseek_v41::DsparkKv dk = seq.dspark_stored_kv();
      for (size_t s = 0; s < dk.rings.size(); ++s) {
        write_npy(*dump_prefix + ".ring" + std::to_string(s) + ".npy", dk.rings[s], T, hd);
        write_npy(*dump_prefix + ".block" + std::to_string(s) + ".npy", dk.block_kv[s],
                  static_cast<int64_t>(dk.block_kv[s].size()) / hd, hd);
      }
    }
  }
  if (replay > 0) {
    std::fprintf(stderr, "decoder replay of the last %lld tokens: %s; the logits of the last %lld positions\n",
                 static_cast<long long>(replay),
                 seq.decoder_replay_start() < 0 ? "the prompt is no longer, exact" : "approximate",
                 static_cast<long long>(rows));
  }
  std::fprintf(stderr, "logits (V4.1, chunks of %lld, QDQ %s): %lld tokens: load %.2f s, forward %.2f s\n",
               static_cast<long long>(chunk), flags.kv_qdq ? "on" : "off", static_cast<long long>(T),
               std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count());
  return 0;
}

int run_logits(int argc, char** argv) {
  Args args("logits",
            "Write fp32 logits [T, vocab] of every prompt position to a .npy file (or, with --mtp, the MTP\n"
            "head's logits [T-1, vocab]: row p from the final streams at p and token p+1, predicting p+2).\n"
            "On a DeepseekV41ForCausalLM checkpoint (--no-kv-qdq turns off its three QDQ steps): one pass,\n"
            "--chunk-size and --rollback as for V4; --mtp writes the DSpark draft head's draft-0\n"
            "logits [T-1, vocab]: row p from the round after p with anchor token p+1, predicting p+2;\n"
            "--mtp-out writes them as well, from the same pass; --confidence-out writes the confidence head's\n"
            "logits [T-1, block] of the same rounds (row p, column k: draft k's raw logit, sigmoid for the\n"
            "probability, along the greedy draft chain); --dump-kv writes the stored window KV, compressed\n"
            "KV and index keys of the main model, in V4's layout, and with --mtp / --mtp-out the DSpark stage\n"
            "rings PREFIX.ring<s>.npy [T, head_dim] and block KV PREFIX.block<s>.npy [(T-1)*block, head_dim];\n"
            "--decoder-replay K runs the decoder layers on\n"
            "the last K positions only and writes their logits [min(T, K), vocab]).");
  add_model_flags(args);
  args.option("prompt-ids", "IDS", "comma-separated token ids, or @FILE holding them");
  args.option("out", "FILE", "output .npy (float32)");
  args.flag("mtp", "write the MTP logits [T-1, vocab] instead of the main logits");
  args.flag("double-accumulation",
            "V4.1: the slow double-accumulation loops instead of the fp32 kernels (they follow the float64 "
            "reference's QDQ rounding decisions free-running)");
  args.option("mtp-out", "FILE", "also write the MTP (DSpark draft-0) logits to FILE, from the same pass (V4.1 only)");
  args.option("confidence-out", "FILE",
              "V4.1, with --mtp or --mtp-out: also write the DSpark confidence logits [T-1, block] (fp32 raw "
              "logits of each teacher-forced round's greedy drafts) to FILE");
  args.option("chunk-size", "N", "feed the prompt in chunks of N tokens (1 = token-by-token decode; 0 = one pass)",
              "0");
  args.option("rollback", "K", "after every chunk run K extra random tokens and roll them back", "0");
  args.option("seed", "S", "seed of the random rollback tokens", "1");
  args.option("simd", "TARGET", "force one compiled SIMD target, e.g. AVX2 (diagnostic: each computes other bits)", "");
  args.option("dump-kv", "PREFIX",
              "also write the stored (QDQ'd) window KV, compressed KV and indexer keys as .npy (V4.1 with --mtp / "
              "--mtp-out: also the DSpark rings PREFIX.ring<s>.npy and block KV PREFIX.block<s>.npy)");
  args.option("decoder-replay", "K",
              "V4.1, one pass: decoder-side bounded replay of the last K prompt tokens (deepinfer-system.md 2.3; "
              "approximate, the decoder windows truncated at T - K; --out holds the last min(T, K) rows; 0 = exact)",
              "0");
  if (!args.parse(argc, argv)) return args.exit_code();

  const std::vector<int32_t> ids = read_ids(args.get("prompt-ids"));
  if (const ModelFlags flags = read_model_flags(args);
      model::ModelConfig::load(flags.dir + "/config.json").arch == model::Architecture::kDeepseekV41) {
    return run_logits_v41(args, flags, ids);
  }
  DSINFER_CHECK(!args.get_optional("mtp-out") && !args.get_optional("confidence-out") &&
                    !args.has("double-accumulation") && args.get_int("decoder-replay") == 0,
                "--mtp-out, --confidence-out, --double-accumulation, --decoder-replay: only on DeepseekV41ForCausalLM "
                "checkpoints");
  const int64_t T = static_cast<int64_t>(ids.size());
  const bool mtp = args.has("mtp");
  int64_t chunk = args.get_int("chunk-size");
  const int64_t rollback = args.get_int("rollback");
  DSINFER_CHECK(chunk >= 0, "--chunk-size must be >= 0, got ", chunk);
  DSINFER_CHECK(rollback >= 0, "--rollback must be >= 0, got ", rollback);
  if (chunk == 0) chunk = T;
  DSINFER_CHECK(!mtp || T >= 2, "--mtp needs at least 2 prompt tokens");

  std::optional<kernels::ScopedTarget> simd;
  if (const std::string want = args.get("simd"); !want.empty()) {
    std::string names;
    for (const kernels::SimdTarget& t : kernels::available_targets()) {
      if (t.name == want) simd.emplace(t);
      names += " " + t.name;
    }
    DSINFER_CHECK(simd.has_value(), "--simd: no target ", want, " in this build on this CPU (have:", names, ")");
  }
  const auto t0 = std::chrono::steady_clock::now();
  const ModelFlags model_flags = read_model_flags(args);
  auto model = v4::Model::load(model_flags.dir, model_options(model_flags));
  const auto t1 = std::chrono::steady_clock::now();
  const int64_t vocab = model->config().vocab_size;
  const int64_t hd = model->shape().hc_dim();
  std::mt19937 rng(static_cast<uint32_t>(args.get_int("seed")));
  std::uniform_int_distribution<int32_t> random_token(0, static_cast<int32_t>(vocab - 1));

  auto seq = model->new_sequence();
  const std::optional<std::string> dump_prefix = args.get_optional("dump-kv");
  std::optional<KvDump> dump;
  if (dump_prefix) dump.emplace(model->shape(), T);
  std::vector<float> logits;
  std::vector<float> hidden;
  std::vector<v4::SequenceOutput> out(1);
  for (int64_t b = 0; b < T; b += chunk) {
    const int64_t n = std::min(chunk, T - b);
    v4::SequenceInput in;
    in.state = seq.get();
    in.tokens = std::span<const int32_t>(ids.data() + b, n);
    in.logits = mtp ? v4::LogitRows::kNone : v4::LogitRows::kAll;
    in.want_hidden = mtp;
    model->forward({&in, 1}, out);
    logits.insert(logits.end(), out[0].logits.begin(), out[0].logits.end());
    hidden.insert(hidden.end(), out[0].hidden.begin(), out[0].hidden.end());
    if (dump) dump->window_all(*seq, b, n);
    if (rollback > 0) {
      const int64_t len = seq->length();
      std::vector<int32_t> junk(rollback);
      for (auto& t : junk) t = random_token(rng);
      in.tokens = junk;
      in.logits = v4::LogitRows::kAll;
      in.want_hidden = false;
      model->forward({&in, 1}, out);
      seq->truncate(len);
    }
  }
  if (dump) dump->write_main(*seq, *dump_prefix, T);
  int64_t rows = T;
  if (mtp) {
    // MTP row p: hidden state at p and token p+1, fed in the same chunking.
    logits.clear();
    rows = T - 1;
    if (dump) dump->begin_mtp(rows);
    for (int64_t b = 0; b < rows; b += chunk) {
      const int64_t n = std::min(chunk, rows - b);
      v4::MtpInput in;
      in.state = seq.get();
      in.hidden = std::span<const float>(hidden.data() + b * hd, n * hd);
      in.tokens = std::span<const int32_t>(ids.data() + b + 1, n);
      in.logits = v4::LogitRows::kAll;
      model->mtp_forward({&in, 1}, out);
      logits.insert(logits.end(), out[0].logits.begin(), out[0].logits.end());
      if (dump) dump->window(*seq, model->shape().n_layers, b, n);
      if (rollback > 0) {
        const int64_t len = seq->mtp_length();
        std::vector<int32_t> junk(rollback);
        for (auto& t : junk) t = random_token(rng);
        std::vector<float> junk_hidden(rollback * hd);
        for (int64_t k = 0; k < rollback; ++k) {
          const int64_t src = static_cast<int64_t>(random_token(rng)) % T;
          std::copy(hidden.begin() + src * hd, hidden.begin() + (src + 1) * hd, junk_hidden.begin() + k * hd);
        }
        in.hidden = junk_hidden;
        in.tokens = junk;
        model->mtp_forward({&in, 1}, out);
        seq->truncate_mtp(len);
      }
    }
  }
  if (dump && mtp) write_npy(*dump_prefix + ".mtp_window.npy", dump->mtp_window(), rows, model->shape().head_dim);
  const auto t2 = std::chrono::steady_clock::now();
  write_npy(args.get("out"), logits, rows, vocab);
  const double load_s = std::chrono::duration<double>(t1 - t0).count();
  const double run_s = std::chrono::duration<double>(t2 - t1).count();
  std::fprintf(stderr, "logits: %lld tokens, %s, chunk %lld, rollback %lld: load %.2f s, forward %.2f s (%.1f tok/s)\n",
               static_cast<long long>(T), model->shape().numerics.describe().c_str(), static_cast<long long>(chunk),
               static_cast<long long>(rollback), load_s, run_s, static_cast<double>(T) / run_s);
  return 0;
}

}  // namespace
DSINFER_COMMAND("logits", "write fp32 logits of every prompt position (.npy)", run_logits);
}  // namespace dsinfer::cli
