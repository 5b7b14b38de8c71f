#include "engine/deepseek_v4/v4_runner.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#if DSINFER_ENGINE_HAVE_V41
#include "engine/deepseek_v41/v41_runner.h"
#endif
#include "kernels/cpu/linear_bf16dot.h"
#include "kernels/cpu/targets.h"
#include "model/deepseek_v4/compressed_block.h"
#include "model/numerics_revision.h"

namespace dsinfer::engine {
namespace {

namespace v4 = model::deepseek_v4;

struct V4Seq final : SequenceState {
  std::unique_ptr<v4::SequenceState> state;
  // Main-model final streams (the MTP block's input) of the last positions it may still need:
  // rows for positions [hidden_begin, hidden_begin + hidden_rows).
  std::vector<float> hidden;
  int64_t hidden_begin = 0, hidden_rows = 0;
  bool mtp = false;  // the MTP block follows this sequence (fixed when it is made)
  int64_t length() const override { return state->length(); }
};

struct V4Block final : KvBlock {
  explicit V4Block(v4::BlockRef r) : ref(std::move(r)) {}
  v4::BlockRef ref;
};

struct V4Snapshot final : WindowSnapshot {
  v4::WindowSnapshot snap;
  std::vector<float> hidden;  // main streams of position() - 1: the first MTP row after a resume
  int64_t position() const override { return snap.position(); }
  int64_t bytes() const override {
    return static_cast<int64_t>(snap.size_bytes() + hidden.size() * sizeof(float));
  }
};

std::string hex64(uint64_t x) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

// One runner may serve several engines at once (bench-serve runs a cached and a cold engine over one
// model). What it keeps between calls is therefore either per sequence (the MTP flag, hidden rows) or
// guarded: the forward's scratch buffers by forward_mu_ (v4::Model::forward serialises its callers
// anyway, so the lock costs no parallelism), and the speculation setting only ever switches on.
class V4Runner final : public ModelRunner {
 public:
  V4Runner(std::unique_ptr<v4::Model> model, std::string identity, V4SequenceCodec codec)
      : model_(std::move(model)), codec_(std::move(codec)) {
    const v4::ModelShape& s = model_->shape();
    hc_dim_ = s.hc_dim();
    info_.identity = std::move(identity);
    // The SIMD target is part of the numerics: no two targets give the same bits (lane count sets the
    // summation order, FMA or not), so a cache shared across machines must not mix them; nor builds
    // whose numerics differ (the revision), nor CPUs with and without AVX-512 BF16 (fast numerics use
    // bf16 dots only where the CPU has them).
    info_.cache_layout = core::str_cat(s.blocks->describe(), "; window ", s.window, "; numerics ",
                                       s.numerics.describe(), "; mtp ", s.has_mtp, "; simd ",
                                       kernels::current_target_name(), "; bf16 dots ",
                                       kernels::bf16dot_hardware() ? "on" : "off", "; numerics revision ",
                                       model::kNumericsRevision);
    info_.vocab_size = static_cast<int32_t>(s.vocab);
    info_.eos_token_id = static_cast<int32_t>(s.config.eos_token_id);
    info_.max_context = s.config.max_position_embeddings;
    info_.window = static_cast<int32_t>(s.window);
    info_.block_tokens = static_cast<int32_t>(s.block_tokens);
    info_.block_bytes = static_cast<int64_t>(s.blocks->bytes());
    info_.sequence_bytes = static_cast<int64_t>(model_->sequence_bytes());
    // A snapshot at a block boundary holds the windows and the last group of the CSA tails: never more
    // than the steady-state sequence, plus one MTP input row.
    info_.snapshot_bytes = info_.sequence_bytes + hc_dim_ * static_cast<int64_t>(sizeof(float));
    // The window rings keep max_draft extra slots, so a verify step of up to max_draft drafts rolls back.
    info_.max_draft_tokens = s.has_mtp ? static_cast<int32_t>(s.max_draft) : 0;
    info_.supports_replay = true;
  }

  const ModelInfo& info() const override { return info_; }
  core::ThreadPool& pool() override { return model_->pool(); }

  void prepare(bool speculation, bool batch_invariant) override {
    // Never switched off: another engine sharing this runner may be drafting. Sequences made from now
    // on feed the MTP block (a little compute for an engine that does not draft; its tokens are the same).
    if (speculation && model_->shape().has_mtp) mtp_.store(true);
    (void)batch_invariant;  // the V4 forward is batch-invariant always (model.h)
  }

  std::unique_ptr<SequenceState> new_sequence() override {
    auto s = std::make_unique<V4Seq>();
    s->state = model_->new_sequence();
    s->mtp = mtp_.load();
    return s;
  }

  void forward(std::span<const ForwardItem> items, std::vector<float>& logits) override {
    const int64_t V = info_.vocab_size;
    std::lock_guard<std::mutex> lock(forward_mu_);
    bool any_mtp = false;
    inputs_.resize(items.size());
    outputs_.resize(items.size());
    starts_.resize(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      const ForwardItem& it = items[i];
      auto& s = seq(*it.seq);
      const int64_t n = static_cast<int64_t>(it.tokens.size());
      DSINFER_CHECK(it.logit_rows >= 0 && it.logit_rows <= n, "forward: item ", i, " asks for ", it.logit_rows,
                    " logit rows of ", n, " tokens");
      v4::SequenceInput& in = inputs_[i];
      in.state = s.state.get();
      in.tokens = it.tokens;
      in.logits = it.logit_rows == 0 ? v4::LogitRows::kNone
                  : it.logit_rows == 1 ? v4::LogitRows::kLast
                                       : v4::LogitRows::kAll;
      in.want_hidden = s.mtp;
      any_mtp |= s.mtp;
      starts_[i] = s.state->length();
    }
    model_->forward(inputs_, outputs_);
    for (size_t i = 0; i < items.size(); ++i) {
      const v4::SequenceOutput& o = outputs_[i];
      const int64_t want = items[i].logit_rows;
      DSINFER_CHECK(o.logit_rows >= want, "forward: the model returned ", o.logit_rows, " logit rows, ", want,
                    " wanted");
      const float* from = o.logits.data() + (o.logit_rows - want) * V;
      logits.insert(logits.end(), from, from + want * V);
    }
    if (any_mtp) feed_mtp(items);
  }

  void truncate(SequenceState& seq_state, int64_t length) override { seq(seq_state).state->truncate(length); }

  std::shared_ptr<const KvBlock> block(const SequenceState& seq_state, int64_t index) override {
    const auto& blocks = seq(seq_state).state->blocks();
    DSINFER_CHECK(index >= 0 && index < static_cast<int64_t>(blocks.size()), "block ", index,
                  " of the sequence is not complete (", blocks.size(), " full blocks)");
    return std::make_shared<V4Block>(blocks[index]);
  }

  // CompressedBlock's own checked frame (magic, version, layout string, index, checksum).
  std::vector<uint8_t> export_block(const KvBlock& block) override {
    const auto* vb = dynamic_cast<const V4Block*>(&block);
    DSINFER_CHECK(vb != nullptr, "export_block: a block that this model did not make");
    return vb->ref->serialize();
  }

  std::shared_ptr<const KvBlock> import_block(int64_t index, std::span<const uint8_t> bytes) override {
    return std::make_shared<V4Block>(v4::CompressedBlock::from_bytes(model_->shape().blocks, index, bytes));
  }

  std::vector<uint8_t> export_sequence(const SequenceState& seq_state) override {
    if (!codec_.save) return {};
    const auto& s = seq(seq_state);
    const int64_t p = s.state->length() - 1;
    std::span<const float> last;
    if (s.mtp && p >= s.hidden_begin && p < s.hidden_begin + s.hidden_rows) {
      last = std::span<const float>(s.hidden.data() + (p - s.hidden_begin) * hc_dim_, static_cast<size_t>(hc_dim_));
    }
    return codec_.save(*s.state, last);
  }

  std::unique_ptr<SequenceState> import_sequence(std::span<const uint8_t> bytes) override {
    if (!codec_.load) return nullptr;
    auto s = std::make_unique<V4Seq>();
    std::vector<float> last;
    s->state = codec_.load(*model_, bytes, last);
    DSINFER_CHECK(s->state != nullptr, "import_sequence: the codec returned no sequence");
    s->mtp = mtp_.load();
    DSINFER_CHECK(last.empty() || static_cast<int64_t>(last.size()) == hc_dim_, "import_sequence: ", last.size(),
                  " last-hidden values, the model has ", hc_dim_);
    // A drafting engine needs the streams of the last position (the first MTP row); like a snapshot
    // without them, a state exported by a runner that did not feed MTP cannot be drafted from.
    if (!last.empty()) {
      s->hidden = std::move(last);
      s->hidden_begin = s->state->length() - 1;
      s->hidden_rows = 1;
    }
    return s;
  }

  std::shared_ptr<const WindowSnapshot> snapshot(const SequenceState& seq_state) override {
    const auto& s = seq(seq_state);
    auto snap = std::make_shared<V4Snapshot>();
    snap->snap = s.state->snapshot();
    const int64_t p = s.state->length() - 1;
    if (s.mtp && p >= s.hidden_begin && p < s.hidden_begin + s.hidden_rows) {
      const float* h = s.hidden.data() + (p - s.hidden_begin) * hc_dim_;
      snap->hidden.assign(h, h + hc_dim_);
    }
    return snap;
  }

  void attach(SequenceState& seq_state, std::span<const std::shared_ptr<const KvBlock>> blocks,
              const WindowSnapshot* snapshot) override {
    auto& s = seq(seq_state);
    std::vector<v4::BlockRef> refs;
    refs.reserve(blocks.size());
    for (const auto& b : blocks) {
      const auto* vb = dynamic_cast<const V4Block*>(b.get());
      DSINFER_CHECK(vb != nullptr, "attach: a block that this model did not make");
      refs.push_back(vb->ref);
    }
    s.state->attach_prefix(refs);
    s.hidden.clear();
    s.hidden_rows = 0;
    if (snapshot) {
      const auto* vs = dynamic_cast<const V4Snapshot*>(snapshot);
      DSINFER_CHECK(vs != nullptr, "attach: a snapshot that this model did not make");
      s.state->restore(vs->snap);
      if (!vs->hidden.empty()) {
        s.hidden = vs->hidden;
        s.hidden_begin = vs->position() - 1;
        s.hidden_rows = 1;
      }
    } else {
      s.state->begin_bounded_replay();
    }
  }

  // Draft 1 comes from the exact MTP row of the last committed position (row L-1: main streams at L-1,
  // the pending token). Drafts 2..k chain the MTP block on its own output streams: round j feeds rows
  // L .. L+j-2 (the approximate rows so far, recomputed bit for bit) in one call and rolls them back
  // after it, so every call starts at L and the state can always return there.
  std::vector<int32_t> draft(std::span<const DraftItem> items) override {
    const size_t n = items.size();
    std::vector<std::vector<int32_t>> drafts(n);
    std::vector<std::vector<float>> chain(n);  // MTP output streams g_{L-1}, g_L, ... per item
    std::vector<int64_t> base(n);              // L
    int32_t rounds = 0;
    {
      std::vector<v4::MtpInput> in(n);
      std::vector<std::vector<float>> rows(n);
      std::vector<int32_t> toks(n);
      for (size_t i = 0; i < n; ++i) {
        const DraftItem& it = items[i];
        DSINFER_CHECK(it.count >= 1 && it.count <= info_.max_draft_tokens, "draft: ", it.count,
                      " drafts asked, the model allows 1 to ", info_.max_draft_tokens);
        auto& s = seq(*it.seq);
        DSINFER_CHECK(s.mtp, "draft: the sequence was made before speculation was enabled (prepare)");
        const int64_t p = s.state->length() - 1;
        DSINFER_CHECK(s.state->mtp_length() == p, "draft: MTP rows at ", s.state->mtp_length(), ", expected ", p);
        base[i] = p + 1;
        rows[i] = hidden_row(s, p, nullptr);
        toks[i] = it.last_token;
        in[i].state = s.state.get();
        in[i].hidden = rows[i];
        in[i].tokens = std::span<const int32_t>(&toks[i], 1);
        in[i].logits = v4::LogitRows::kLast;
        in[i].want_hidden = it.count > 1;
        rounds = std::max(rounds, it.count);
      }
      std::vector<v4::SequenceOutput> out(n);
      model_->mtp_forward(in, out);
      for (size_t i = 0; i < n; ++i) {
        drafts[i].push_back(argmax(out[i].logits));
        chain[i] = std::move(out[i].hidden);
      }
    }
    for (int32_t j = 2; j <= rounds; ++j) {
      std::vector<size_t> who;
      for (size_t i = 0; i < n; ++i) {
        if (items[i].count >= j) who.push_back(i);
      }
      std::vector<v4::MtpInput> in(who.size());
      for (size_t w = 0; w < who.size(); ++w) {
        const size_t i = who[w];
        in[w].state = seq(*items[i].seq).state.get();
        in[w].hidden = std::span<const float>(chain[i].data(), static_cast<size_t>(j - 1) * hc_dim_);
        in[w].tokens = drafts[i];  // d1 .. d_{j-1}
        in[w].logits = v4::LogitRows::kLast;
        in[w].want_hidden = items[i].count > j;
      }
      std::vector<v4::SequenceOutput> out(who.size());
      model_->mtp_forward(in, out);
      for (size_t w = 0; w < who.size(); ++w) {
        const size_t i = who[w];
        seq(*items[i].seq).state->truncate_mtp(base[i]);
        drafts[i].push_back(argmax(out[w].logits));
        if (items[i].count > j) {
          const auto& h = out[w].hidden;
          chain[i].insert(chain[i].end(), h.end() - hc_dim_, h.end());
        }
      }
    }
    std::vector<int32_t> flat;
    for (const auto& d : drafts) flat.insert(flat.end(), d.begin(), d.end());
    return flat;
  }

 private:
  static V4Seq& seq(SequenceState& s) { return static_cast<V4Seq&>(s); }
  static const V4Seq& seq(const SequenceState& s) { return static_cast<const V4Seq&>(s); }

  // The main streams of position p: kept from an earlier step, or from this step's output.
  std::vector<float> hidden_row(const V4Seq& s, int64_t p, const v4::SequenceOutput* out, int64_t start = 0) const {
    const float* h = nullptr;
    if (p >= s.hidden_begin && p < s.hidden_begin + s.hidden_rows) {
      h = s.hidden.data() + (p - s.hidden_begin) * hc_dim_;
    } else if (out && p >= start && p < start + static_cast<int64_t>(out->hidden.size()) / hc_dim_) {
      h = out->hidden.data() + (p - start) * hc_dim_;
    } else if (out && !out->hidden.empty()) {
      // The streams of the position before a resumed snapshot are unknown (snapshot taken without
      // them): stand in with the first new position's. Drafts only; verification stays exact.
      h = out->hidden.data();
    }
    DSINFER_CHECK(h != nullptr, "MTP input of position ", p, " is not available");
    return std::vector<float>(h, h + hc_dim_);
  }

  // Feeds the MTP block every position whose next token is now known (all but the last of each
  // item), so its window ring follows the main model; keeps the last streams for drafting/rollback.
  void feed_mtp(std::span<const ForwardItem> items) {
    std::vector<v4::MtpInput> in;
    std::vector<std::vector<float>> rows;
    std::vector<std::vector<int32_t>> toks;
    in.reserve(items.size());
    rows.reserve(items.size());
    toks.reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      auto& s = seq(*items[i].seq);
      if (!s.mtp) continue;
      const v4::SequenceOutput& o = outputs_[i];
      const int64_t start = starts_[i], end = s.state->length();
      const int64_t first = s.state->mtp_length();
      DSINFER_CHECK(first >= start - 1, "MTP rows lag the main model (", first, " < ", start - 1, ")");
      std::vector<float> h;
      std::vector<int32_t> t;
      for (int64_t p = first; p + 1 < end; ++p) {
        std::vector<float> row = hidden_row(s, p, &o, start);
        h.insert(h.end(), row.begin(), row.end());
        t.push_back(items[i].tokens[p + 1 - start]);
      }
      if (!t.empty()) {
        rows.push_back(std::move(h));
        toks.push_back(std::move(t));
        v4::MtpInput m;
        m.state = s.state.get();
        m.logits = v4::LogitRows::kNone;
        in.push_back(m);
      }
      // Keep the streams a rollback or the next draft may need (the last max_draft + 1 positions).
      const int64_t keep = std::min<int64_t>(end - start, info_.max_draft_tokens + 1);
      s.hidden.assign(o.hidden.end() - keep * hc_dim_, o.hidden.end());
      s.hidden_begin = end - keep;
      s.hidden_rows = keep;
    }
    for (size_t k = 0; k < in.size(); ++k) {
      in[k].hidden = rows[k];
      in[k].tokens = toks[k];
    }
    if (in.empty()) return;
    std::vector<v4::SequenceOutput> out(in.size());
    model_->mtp_forward(in, out);
  }

  std::unique_ptr<v4::Model> model_;
  V4SequenceCodec codec_;
  ModelInfo info_;
  int64_t hc_dim_ = 0;
  std::atomic<bool> mtp_{false};
  std::mutex forward_mu_;  // guards the scratch below (whole forward, feed_mtp included)
  std::vector<v4::SequenceInput> inputs_;
  std::vector<v4::SequenceOutput> outputs_;
  std::vector<int64_t> starts_;
};

}  // namespace

std::string checkpoint_identity(const std::string& dir) {
  namespace fs = std::filesystem;
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  auto add_file_prefix = [&](const fs::path& p, bool whole, bool safetensors_header) {
    std::ifstream f(p, std::ios::binary);
    DSINFER_CHECK(f.good(), "model identity: cannot read ", p.string());
    const std::string name = p.filename().string();
    XXH3_64bits_update(st, name.data(), name.size());
    const uint64_t size = fs::file_size(p);
    XXH3_64bits_update(st, &size, sizeof size);
    std::string bytes;
    if (whole) {
      std::ostringstream ss;
      ss << f.rdbuf();
      bytes = ss.str();
    } else if (safetensors_header) {
      uint64_t n = 0;
      f.read(reinterpret_cast<char*>(&n), 8);
      DSINFER_CHECK(f.good() && n < (uint64_t{1} << 30), "model identity: bad safetensors header in ", p.string());
      bytes.resize(n);
      f.read(bytes.data(), static_cast<std::streamsize>(n));
    }
    XXH3_64bits_update(st, bytes.data(), bytes.size());
  };
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name == "config.json" || name == "model.safetensors.index.json" ||
        (name.size() > 12 && name.substr(name.size() - 12) == ".safetensors")) {
      files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  DSINFER_CHECK(!files.empty(), "model identity: no config.json or safetensors in ", dir);
  for (const auto& p : files) {
    const std::string name = p.filename().string();
    add_file_prefix(p, name.find(".json") != std::string::npos, name.find(".safetensors") == name.size() - 12);
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return "deepseek_v4:" + hex64(h);
}

std::shared_ptr<ModelRunner> open_model(const std::string& dir, const V4RunnerOptions& options) {
#if DSINFER_ENGINE_HAVE_V41
  // The registry's architectures[0] picks the adapter; V4.1 takes the options it has (v41_runner.h).
  const model::ModelConfig config = model::ModelConfig::load(dir + "/config.json");
  if (config.arch == model::Architecture::kDeepseekV41) {
    // V4.1 has the exact and the fast forward (PrefillOptions::fast); `reference` has no V4.1 form.
    DSINFER_CHECK(options.model.numerics.mode != v4::NumericsMode::kReference, dir,
                  ": a DeepseekV41ForCausalLM checkpoint has no --numerics reference (exact or fast)");
    V41RunnerOptions o;
    o.qdq = options.model.numerics.kv_qdq;
    o.fast = options.model.numerics.fast();
    o.threads = options.model.threads;
    o.pool = options.model.pool;
    auto runner = open_v41_model(dir, o);
    if (options.model.progress) options.model.progress(1, 1);
    return runner;
  }
#endif
  v4::ModelOptions mo = options.model;
  if (mo.pool == nullptr && mo.threads == 0) mo.pool = &core::ThreadPool::global();
  std::string identity = checkpoint_identity(dir) + "; numerics " + mo.numerics.describe();
  return std::make_shared<V4Runner>(v4::Model::load(dir, mo), std::move(identity), options.sequence_codec);
}

}  // namespace dsinfer::engine
