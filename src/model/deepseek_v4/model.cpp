#include "model/deepseek_v4/model.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "model/deepseek_v4/block.h"
#include "model/deepseek_v4/mhc.h"

namespace dsinfer::model::deepseek_v4 {

std::unique_ptr<Model> Model::load(const std::string& dir, const ModelOptions& options) {
  std::unique_ptr<Model> m(new Model());
  m->ckpt_ = Checkpoint::open(dir);
  m->shape_ = std::make_shared<const ModelShape>(
      ModelShape::build(m->ckpt_->config(), options.numerics, options.max_draft));
  m->weights_ = ModelWeights::load(*m->ckpt_, *m->shape_, options.progress);
  // The embedding table is the only weight read from the mapping after the load (the rest is repacked
  // and its pages released), so it is all a prefault needs to read.
  if (options.prefault) m->ckpt_->touch(m->ckpt_->get("embed.weight"));
  if (options.pool != nullptr) {
    m->pool_ = options.pool;
  } else {
    m->own_pool_ = std::make_unique<core::ThreadPool>(options.threads);
    m->pool_ = m->own_pool_.get();
  }
  m->ws_.set_threads(m->pool_->size());
  return m;
}

Model::~Model() = default;

std::unique_ptr<SequenceState> Model::new_sequence() const { return std::make_unique<SequenceState>(shape_); }

size_t Model::sequence_bytes() const {
  SequenceState probe(shape_);
  probe.begin_step(1);
  if (shape_->has_mtp) probe.begin_mtp_step(1);
  return probe.memory().total();
}

void Model::prepare_rope(StepContext& ctx) {
  const ModelShape& s = *shape_;
  const int64_t N = ctx.n_rows(), pairs = s.rope_dim / 2;
  for (int kind = 0; kind < 2; ++kind) ctx.rope[kind].resize(N * s.rope_dim);
  // Per row and independent (cos/sin in double: a prefill's rows are worth both threads).
  pool_->parallel_for(N, 32, [&](int64_t b, int64_t e) {
    for (int kind = 0; kind < 2; ++kind)
      for (int64_t r = b; r < e; ++r) {
        float* c = ctx.rope[kind].data() + r * s.rope_dim;
        kernels::rope_cos_sin(s.rope_freqs[kind].data(), pairs, ctx.rows[r].pos, c, c + pairs);
      }
  });
}

void Model::write_outputs(StepContext& ctx, const float* X, const HcWeights& head, const std::vector<float>& norm,
                          std::span<const LogitRows> want, std::span<const bool> hidden,
                          std::span<SequenceOutput> out) {
  const ModelShape& s = *shape_;
  const int64_t hd = s.hc_dim(), d = s.dim;
  std::vector<int64_t> logit_rows;  // rows of X needing logits, in output order
  for (size_t i = 0; i < ctx.seqs.size(); ++i) {
    const SeqSlice& q = ctx.seqs[i];
    SequenceOutput& o = out[i];
    if (hidden[i]) {
      o.hidden.resize(q.n * hd);
      std::copy(X + q.first_row * hd, X + (q.first_row + q.n) * hd, o.hidden.data());
    } else {
      o.hidden.clear();
    }
    o.logit_rows = want[i] == LogitRows::kAll ? q.n : want[i] == LogitRows::kLast ? 1 : 0;
    for (int64_t k = q.n - o.logit_rows; k < q.n; ++k) logit_rows.push_back(q.first_row + k);
  }
  const int64_t R = static_cast<int64_t>(logit_rows.size());
  if (R == 0) {
    for (auto& o : out) o.logits.clear();
    return;
  }
  float* xs = ctx.ws->f(kWsX2, R * hd);
  for (int64_t k = 0; k < R; ++k) std::copy(X + logit_rows[k] * hd, X + (logit_rows[k] + 1) * hd, xs + k * hd);
  float* y = ctx.ws->f(kWsHead, R * d);
  ctx.clock.enter(Stage::kHead);
  hc_head(head, ctx, xs, R, y);
  for (int64_t k = 0; k < R; ++k) {
    kernels::rmsnorm(y + k * d, norm.data(), d, s.eps, y + k * d);
    s.numerics.bf16(y + k * d, d);
  }
  auto head_forward = [&](const float* in, int64_t rows, float* logits_out) {
    if (!weights_.head_bf16.empty()) {
      weights_.head_bf16.forward(in, rows, d, logits_out, s.vocab, pool_);
    } else {
      weights_.head.forward(in, rows, d, logits_out, s.vocab, pool_);
    }
  };
  // One product over the rows of every sequence: the head is the largest weight, so a batch must
  // read it once per step, not once per sequence. A lone sequence writes straight into its output.
  const auto one = std::find_if(out.begin(), out.end(), [](const SequenceOutput& o) { return o.logit_rows > 0; });
  if (one->logit_rows == R) {
    for (auto& o : out) o.logits.resize(o.logit_rows * s.vocab);
    head_forward(y, R, one->logits.data());
    return;
  }
  float* logits = ctx.ws->f(kWsLogits, R * s.vocab);  // reused across steps: no fresh pages per step
  head_forward(y, R, logits);
  // The copies out on the pool: 16 sequences' rows are 8 MB of MEDIUM logits per step.
  std::vector<int64_t> first(out.size() + 1, 0);
  for (size_t i = 0; i < out.size(); ++i) first[i + 1] = first[i] + out[i].logit_rows;
  pool_->parallel_for(static_cast<int64_t>(out.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      out[i].logits.assign(logits + first[i] * s.vocab, logits + first[i + 1] * s.vocab);
  });
}

void Model::run_layers(StepContext& ctx, float* X, bool mtp) {
  if (mtp) {
    block_forward(weights_.mtp->block, shape_->mtp_layer(), ctx, X);
    return;
  }
  for (int64_t l = 0; l < shape_->n_layers; ++l) block_forward(weights_.layers[l], shape_->layers[l], ctx, X);
}

namespace {

void check_token(int32_t id, int64_t vocab, size_t seq, size_t k) {
  DSINFER_CHECK(id >= 0 && id < vocab, "forward: token id ", id, " of batch item ", seq, " at chunk offset ", k,
                " is outside the vocabulary [0, ", vocab, ")");
}

// Undoes begin_step when a step fails half way, so the states stay usable.
struct StepGuard {
  std::vector<SequenceState*> states;
  bool mtp = false;
  bool done = false;
  ~StepGuard() {
    if (done) return;
    for (SequenceState* s : states) {
      if (mtp) {
        s->truncate_mtp(s->mtp_length());
      } else {
        s->truncate(s->length());
      }
    }
  }
};

}  // namespace

void Model::forward(std::span<const SequenceInput> batch, std::span<SequenceOutput> outputs) {
  const ModelShape& s = *shape_;
  DSINFER_CHECK(outputs.size() == batch.size(), "forward: ", batch.size(), " inputs but ", outputs.size(), " outputs");
  std::set<const SequenceState*> seen;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceInput& in = batch[i];
    DSINFER_CHECK(in.state != nullptr, "forward: batch item ", i, " has no sequence state");
    DSINFER_CHECK(&in.state->shape() == shape_.get(), "forward: batch item ", i, " belongs to another model");
    DSINFER_CHECK(seen.insert(in.state).second, "forward: sequence of batch item ", i, " appears twice in the batch");
    DSINFER_CHECK(!in.tokens.empty(), "forward: batch item ", i, " has no tokens");
    DSINFER_CHECK(!in.state->needs_window_state(), "forward: batch item ", i,
                  " was attached to cached blocks without restore() or begin_bounded_replay()");
    for (size_t k = 0; k < in.tokens.size(); ++k) check_token(in.tokens[k], s.vocab, i, k);
  }
  if (batch.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);

  StepContext ctx;
  ctx.shape = &s;
  ctx.pool = pool_;
  ctx.ws = &ws_;
  ctx.clock = StageClock(profile_, pool_);
  StepGuard guard;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceInput& in = batch[i];
    SequenceState& st = *in.state;
    st.begin_step(static_cast<int64_t>(in.tokens.size()));
    guard.states.push_back(&st);
    SeqSlice q;
    q.state = &st;
    q.first_row = ctx.n_rows();
    q.n = static_cast<int64_t>(in.tokens.size());
    q.start = st.length();
    q.window_floor = st.window_floor();
    q.replay_end = st.replay_end();
    ctx.seqs.push_back(q);
    for (int64_t k = 0; k < q.n; ++k) ctx.rows.push_back({static_cast<int32_t>(i), in.tokens[k], q.start + k});
  }
  prepare_rope(ctx);

  const int64_t N = ctx.n_rows(), d = s.dim, hd = s.hc_dim();
  if (residual_.size() < static_cast<size_t>(N * hd)) residual_.resize(N * hd);
  float* const X = residual_.data();  // every element is written below before it is read
  pool_->parallel_for(N, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const uint16_t* row = weights_.embed + static_cast<int64_t>(ctx.rows[r].token) * d;
      float* x = X + r * hd;
      for (int64_t c = 0; c < d; ++c) x[c] = core::bf16_to_float(row[c]);
      for (int64_t j = 1; j < s.hc; ++j) std::copy(x, x + d, x + j * d);
    }
  });
  run_layers(ctx, X, false);

  std::vector<LogitRows> want;
  std::vector<bool> hidden_flags;
  for (const auto& in : batch) {
    want.push_back(in.logits);
    hidden_flags.push_back(in.want_hidden);
  }
  std::unique_ptr<bool[]> hidden(new bool[batch.size()]);
  for (size_t i = 0; i < batch.size(); ++i) hidden[i] = hidden_flags[i];
  write_outputs(ctx, X, weights_.hc_head, weights_.norm, want, {hidden.get(), batch.size()}, outputs);
  ctx.clock.enter(Stage::kOther);
  guard.done = true;
  for (size_t i = 0; i < ctx.seqs.size(); ++i) {
    ctx.seqs[i].state->end_step(ctx.seqs[i].n);
    if (!batch[i].rollback) ctx.seqs[i].state->release_rollback();
  }
  ctx.clock.enter(Stage::kOther);
  if (profile_ != nullptr) profile_->end_step();
}

void Model::mtp_forward(std::span<const MtpInput> batch, std::span<SequenceOutput> outputs) {
  const ModelShape& s = *shape_;
  DSINFER_CHECK(s.has_mtp && weights_.mtp.has_value(), "mtp_forward: this model has no MTP block");
  DSINFER_CHECK(outputs.size() == batch.size(), "mtp_forward: ", batch.size(), " inputs but ", outputs.size(),
                " outputs");
  const int64_t d = s.dim, hd = s.hc_dim();
  std::set<const SequenceState*> seen;
  for (size_t i = 0; i < batch.size(); ++i) {
    const MtpInput& in = batch[i];
    DSINFER_CHECK(in.state != nullptr, "mtp_forward: batch item ", i, " has no sequence state");
    DSINFER_CHECK(&in.state->shape() == shape_.get(), "mtp_forward: batch item ", i, " belongs to another model");
    DSINFER_CHECK(seen.insert(in.state).second, "mtp_forward: sequence of batch item ", i, " appears twice");
    DSINFER_CHECK(!in.tokens.empty(), "mtp_forward: batch item ", i, " has no rows");
    DSINFER_CHECK(in.hidden.size() == in.tokens.size() * static_cast<size_t>(hd), "mtp_forward: batch item ", i, " has ",
                  in.tokens.size(), " tokens but ", in.hidden.size(), " hidden values (expected tokens x ", hd, ")");
    for (size_t k = 0; k < in.tokens.size(); ++k) check_token(in.tokens[k], s.vocab, i, k);
  }
  if (batch.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const MtpWeights& mw = *weights_.mtp;
  const Numerics& num = s.numerics;

  StepContext ctx;
  ctx.shape = &s;
  ctx.pool = pool_;
  ctx.ws = &ws_;
  ctx.mtp = true;
  StepGuard guard;
  guard.mtp = true;
  for (size_t i = 0; i < batch.size(); ++i) {
    const MtpInput& in = batch[i];
    SequenceState& st = *in.state;
    st.begin_mtp_step(static_cast<int64_t>(in.tokens.size()));
    guard.states.push_back(&st);
    SeqSlice q;
    q.state = &st;
    q.first_row = ctx.n_rows();
    q.n = static_cast<int64_t>(in.tokens.size());
    q.start = st.mtp_length();
    q.window_floor = st.mtp_window_floor();
    ctx.seqs.push_back(q);
    for (int64_t k = 0; k < q.n; ++k) ctx.rows.push_back({static_cast<int32_t>(i), in.tokens[k], q.start + k});
  }
  prepare_rope(ctx);
  const int64_t N = ctx.n_rows(), H = s.hc;

  // e = e_proj · enorm(embed(token)); h_j = h_proj · hnorm(X_j); X_j = e + h_j (§2.12).
  std::vector<float> e_in(N * d), h_in(N * hd), e_out(N * d), h_out(N * hd), X(N * hd);
  pool_->parallel_for(N, 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int32_t seq = ctx.rows[r].seq;
      const int64_t k = r - ctx.seqs[seq].first_row;
      const uint16_t* row = weights_.embed + static_cast<int64_t>(ctx.rows[r].token) * d;
      float* x = e_in.data() + r * d;
      for (int64_t c = 0; c < d; ++c) x[c] = core::bf16_to_float(row[c]);
      kernels::rmsnorm(x, mw.enorm.data(), d, s.eps, x);
      num.bf16(x, d);
      const float* src = batch[seq].hidden.data() + k * hd;
      for (int64_t j = 0; j < H; ++j) {
        kernels::rmsnorm(src + j * d, mw.hnorm.data(), d, s.eps, h_in.data() + r * hd + j * d);
        num.bf16(h_in.data() + r * hd + j * d, d);
      }
    }
  });
  num.act_quant(e_in.data(), N * d);
  num.act_quant(h_in.data(), N * hd);
  mw.e_proj.forward(e_in.data(), N, d, e_out.data(), d, pool_);
  mw.h_proj.forward(h_in.data(), N * H, d, h_out.data(), d, pool_);
  num.bf16(e_out.data(), N * d);
  num.bf16(h_out.data(), N * hd);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t j = 0; j < H; ++j)
      for (int64_t c = 0; c < d; ++c) X[r * hd + j * d + c] = e_out[r * d + c] + h_out[r * hd + j * d + c];
  num.bf16(X.data(), N * hd);
  run_layers(ctx, X.data(), true);

  std::vector<LogitRows> want;
  std::unique_ptr<bool[]> hidden(new bool[batch.size()]);
  for (size_t i = 0; i < batch.size(); ++i) {
    want.push_back(batch[i].logits);
    hidden[i] = batch[i].want_hidden;
  }
  write_outputs(ctx, X.data(), mw.head, mw.norm, want, {hidden.get(), batch.size()}, outputs);
  guard.done = true;
  for (auto& q : ctx.seqs) q.state->end_mtp_step(q.n);
}

}  // namespace dsinfer::model::deepseek_v4
