#include "model/deepseek_v4/weights.h"

#include "core/dtypes.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/linear_fp8bf16.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

using core::DType;

class Loader {
 public:
  Loader(const Checkpoint& ckpt, const ModelShape& s) : ckpt_(ckpt), s_(s) {}

  // bf16_weight_dot: a BF16 weight too takes bf16 dot products in fast mode (the compressors).
  kernels::Linear linear(const std::string& prefix, int64_t rows, int64_t cols, bool bf16_weight_dot = false) const {
    kernels::WeightView v = ckpt_.linear(prefix, rows, cols);
    if (v.name.empty()) v.name = prefix;  // so the kernels' own checks name the tensor
    // --numerics fast on a CPU with AVX-512 BF16: FP8 weights as bf16 dot products (linear_fp8bf16.h).
    const bool bf16_dot = s_.numerics.fast() && kernels::fp8bf16_hardware();
    kernels::Linear l(v, bf16_dot ? kernels::Fp8Products::kBf16Dot : kernels::Fp8Products::kExact,
                      bf16_dot && bf16_weight_dot ? kernels::Bf16Products::kBf16Dot : kernels::Bf16Products::kExact);
    // The Linear holds its own repacked copy: the mapped bytes leave memory now, so that no weight is
    // resident twice, not even during the load (the peak would be the checkpoint plus its copy).
    ckpt_.release(ckpt_.get(prefix + ".weight"));
    if (const TensorView* scale = ckpt_.find(prefix + ".scale")) ckpt_.release(*scale);
    return l;
  }

  // A BF16 or F32 vector of exactly n elements, as fp32.
  std::vector<float> vec(const std::string& name, int64_t n) const {
    const TensorView& t = ckpt_.get(name);
    DSINFER_CHECK(t.numel() == n, ckpt_.dir(), ": tensor ", name, " has ", t.numel(), " elements, expected ", n);
    std::vector<float> out(n);
    if (t.dtype == DType::kBF16) {
      const uint16_t* p = t.as<uint16_t>();
      for (int64_t i = 0; i < n; ++i) out[i] = core::bf16_to_float(p[i]);
    } else if (t.dtype == DType::kF32) {
      const float* p = t.as<float>();
      out.assign(p, p + n);
    } else {
      core::fail(ckpt_.dir(), ": tensor ", name, " must be BF16 or F32, found dtype ", static_cast<int>(t.dtype));
    }
    return out;
  }

  HcWeights hc(const std::string& stem, int64_t mixes, int64_t scales) const {
    HcWeights w;
    const TensorView& fn = ckpt_.get(stem + "_fn", DType::kF32, {mixes, s_.hc_dim()});
    kernels::WeightView v;
    v.format = kernels::WeightFormat::kF32;
    v.rows = mixes;
    v.cols = s_.hc_dim();
    v.data = fn.data;
    v.name = stem + "_fn";
    w.fn = kernels::Linear(v);
    ckpt_.release(fn);
    w.base = vec(stem + "_base", mixes);
    w.scale = vec(stem + "_scale", scales);
    return w;
  }

  CompressorWeights compressor(const std::string& prefix, int64_t ratio, int64_t width) const {
    CompressorWeights c;
    c.ratio = ratio;
    c.width = width;
    c.overlap = ratio == 4;
    const int64_t cw = (c.overlap ? 2 : 1) * width;
    // Fast mode: bf16 activations into wkv/wgate as into the head (the reference computes both in fp32);
    // at 16 decode rows the fp32 products were ~3 % of a step (bench_linear compressor.wkv{,.bf16dot}).
    c.wkv = linear(prefix + "wkv", cw, s_.dim, true);
    c.wgate = linear(prefix + "wgate", cw, s_.dim, true);
    c.ape = vec(prefix + "ape", ratio * cw);
    c.norm = vec(prefix + "norm.weight", width);
    return c;
  }

  // --numerics fast: an FP4 weight repacked for the int8 products; the mapped bytes leave memory as in
  // linear().
  kernels::Fp4Int8Linear int8_linear(const std::string& prefix, int64_t rows, int64_t cols) const {
    kernels::WeightView v = ckpt_.linear(prefix, rows, cols);
    if (v.name.empty()) v.name = prefix;
    kernels::Fp4Int8Linear l(v);
    ckpt_.release(ckpt_.get(prefix + ".weight"));
    if (const TensorView* scale = ckpt_.find(prefix + ".scale")) ckpt_.release(*scale);
    return l;
  }

  // --numerics fast: a BF16 weight repacked for bf16 dot products (linear_bf16dot.h).
  kernels::Bf16DotLinear bf16dot_linear(const std::string& prefix, int64_t rows, int64_t cols) const {
    kernels::WeightView v = ckpt_.linear(prefix, rows, cols);
    if (v.name.empty()) v.name = prefix;
    kernels::Bf16DotLinear l(v);
    ckpt_.release(ckpt_.get(prefix + ".weight"));
    return l;
  }

  ExpertWeights expert(const std::string& prefix, int64_t inter, bool routed) const {
    ExpertWeights e;
    if (routed && s_.numerics.fast() &&
        ckpt_.linear(prefix + "w1", inter, s_.dim).format == kernels::WeightFormat::kFP4 &&
        ckpt_.linear(prefix + "w2", s_.dim, inter).format == kernels::WeightFormat::kFP4 &&
        ckpt_.linear(prefix + "w3", inter, s_.dim).format == kernels::WeightFormat::kFP4) {
      e.w1_int8 = int8_linear(prefix + "w1", inter, s_.dim);
      e.w2_int8 = int8_linear(prefix + "w2", s_.dim, inter);
      e.w3_int8 = int8_linear(prefix + "w3", inter, s_.dim);
      return e;
    }
    e.w1 = linear(prefix + "w1", inter, s_.dim);
    e.w2 = linear(prefix + "w2", s_.dim, inter);
    e.w3 = linear(prefix + "w3", inter, s_.dim);
    return e;
  }

  BlockWeights block(const LayerShape& ls) const {
    BlockWeights b;
    const std::string& p = ls.prefix;
    b.hc_attn = hc(p + "hc_attn", s_.mixes(), 3);
    b.hc_ffn = hc(p + "hc_ffn", s_.mixes(), 3);
    b.attn_norm = vec(p + "attn_norm.weight", s_.dim);
    b.ffn_norm = vec(p + "ffn_norm.weight", s_.dim);

    const std::string a = p + "attn.";
    AttentionWeights& at = b.attn;
    at.wq_a = linear(a + "wq_a", s_.q_lora, s_.dim);
    at.wq_b = linear(a + "wq_b", s_.heads * s_.head_dim, s_.q_lora);
    at.wkv = linear(a + "wkv", s_.head_dim, s_.dim);
    at.wo_a = linear(a + "wo_a", s_.groups * s_.o_lora, s_.heads * s_.head_dim / s_.groups);
    at.wo_b = linear(a + "wo_b", s_.dim, s_.groups * s_.o_lora);
    at.q_norm = vec(a + "q_norm.weight", s_.q_lora);
    at.kv_norm = vec(a + "kv_norm.weight", s_.head_dim);
    at.sink = vec(a + "attn_sink", s_.heads);
    if (ls.compressed()) at.compressor = compressor(a + "compressor.", ls.ratio, s_.head_dim);
    if (ls.csa()) {
      IndexerWeights ix;
      ix.wq_b = linear(a + "indexer.wq_b", s_.index_heads * s_.index_dim, s_.q_lora);
      ix.weights_proj = linear(a + "indexer.weights_proj", s_.index_heads, s_.dim);
      ix.compressor = compressor(a + "indexer.compressor.", ls.ratio, s_.index_dim);
      at.indexer = std::move(ix);
    }

    const std::string f = p + "ffn.";
    MoeWeights& m = b.ffn;
    m.gate = linear(f + "gate", s_.experts, s_.dim);
    if (ls.hash) {
      const TensorView& t = ckpt_.get(f + "gate.tid2eid");
      DSINFER_CHECK(t.dtype == DType::kI64 || t.dtype == DType::kI32, ckpt_.dir(), ": tensor ", f,
                    "gate.tid2eid must be I64 or I32");
      DSINFER_CHECK(t.numel() == s_.vocab * s_.topk, ckpt_.dir(), ": tensor ", f, "gate.tid2eid has ", t.numel(),
                    " elements, expected vocab x experts_per_token = ", s_.vocab * s_.topk);
      m.tid2eid.resize(t.numel());
      for (int64_t i = 0; i < t.numel(); ++i) {
        const int64_t e = t.dtype == DType::kI64 ? t.as<int64_t>()[i] : t.as<int32_t>()[i];
        DSINFER_CHECK(e >= 0 && e < s_.experts, ckpt_.dir(), ": tensor ", f, "gate.tid2eid[", i / s_.topk, "][",
                      i % s_.topk, "] = ", e, " is not an expert id in [0, ", s_.experts, ")");
        m.tid2eid[i] = static_cast<int32_t>(e);
      }
    } else {
      m.bias = vec(f + "gate.bias", s_.experts);
    }
    // The routed experts are most of the checkpoint and each is too small for Linear to split its own
    // packing: pack them side by side on the pool (a weight's packed bytes do not depend on who packs
    // it; an invalid weight still fails naming itself, rethrown by run()).
    m.experts.resize(s_.experts);
    core::ThreadPool::global().run(s_.experts, [&](int64_t e, int) {
      m.experts[e] = expert(core::str_cat(f, "experts.", e, "."), s_.inter, true);
    });
    m.shared = expert(f + "shared_experts.", s_.shared_inter, false);
    return b;
  }

 private:
  const Checkpoint& ckpt_;
  const ModelShape& s_;
};

}  // namespace

ModelWeights ModelWeights::load(const Checkpoint& ckpt, const ModelShape& s,
                                const std::function<void(int64_t, int64_t)>& on_layer) {
  Loader ld(ckpt, s);
  ModelWeights w;
  const TensorView& embed = ckpt.get("embed.weight", DType::kBF16, {s.vocab, s.dim});
  w.embed = embed.as<uint16_t>();
  if (s.numerics.fast() && kernels::bf16dot_hardware() &&
      ckpt.linear("head", s.vocab, s.dim).format == kernels::WeightFormat::kBF16) {
    w.head_bf16 = ld.bf16dot_linear("head", s.vocab, s.dim);
  } else {
    w.head = ld.linear("head", s.vocab, s.dim);
  }
  w.norm = ld.vec("norm.weight", s.dim);
  w.hc_head = ld.hc("hc_head", s.hc, 1);
  const int64_t total = s.n_layers + (s.has_mtp ? 1 : 0);
  for (int64_t l = 0; l < s.n_layers; ++l) {
    w.layers.push_back(ld.block(s.layers[l]));
    if (on_layer) on_layer(l + 1, total);
  }
  if (s.has_mtp) {
    const LayerShape& ls = s.mtp_layer();
    MtpWeights m;
    m.block = ld.block(ls);
    m.e_proj = ld.linear(ls.prefix + "e_proj", s.dim, s.dim);
    m.h_proj = ld.linear(ls.prefix + "h_proj", s.dim, s.dim);
    m.enorm = ld.vec(ls.prefix + "enorm.weight", s.dim);
    m.hnorm = ld.vec(ls.prefix + "hnorm.weight", s.dim);
    m.norm = ld.vec(ls.prefix + "norm.weight", s.dim);
    m.head = ld.hc(ls.prefix + "hc_head", s.hc, 1);
    w.mtp = std::move(m);
    if (on_layer) on_layer(total, total);
  }
  // What remains mapped and resident (small vectors, routing tables, headers) was copied too; only the
  // embedding table is read in place.
  ckpt.release_all_except(&embed);
  return w;
}

}  // namespace dsinfer::model::deepseek_v4
