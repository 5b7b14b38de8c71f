#include "model/deepseek_v41/prefill_impl.h"

namespace dsinfer::model::deepseek_v41::detail {

// Decoder-side bounded replay at the first decoder layer D: its attention input `a` (from the
// encoder output alone) and compressor for every row of the chunk, exactly as block() would; then
// only the last rows go on (streams, deferred mix, the encoder's per-row selections and candidate
// mask), from position s = pos0_ + skip, where the decoder windows start.
void Prefill::enter_replay(std::vector<double>& pre_in, int64_t skip) {
  const std::string p = c_.layer_prefix(decoder_);
  const Vec a = rms_norm(collapse(pre_in), d_, w_.vec(p + "attn_norm.weight"), c_.rms_norm_eps);
  const int64_t ratio = c_.layer_roles(decoder_).ratio;
  Vec u, g;
  compressor_inputs(p + "attn.", a, ratio, u, g);
  compress(source(decoder_, ratio), p + "attn.", u, g, ratio);
  precompressed_ = true;
  X_.erase(X_.begin(), X_.begin() + skip * hc_ * d_);
  pre_in.erase(pre_in.begin(), pre_in.begin() + skip * hc_);
  // Only what the encoder computed for this chunk has its rows (decoder layers' are a past chunk's).
  if (c_.candidate_source_layer_id >= 0 && c_.candidate_source_layer_id < decoder_) {
    cand_.erase(cand_.begin(), cand_.begin() + skip);
  }
  for (auto& [L, sel] : selections_) {
    if (L < decoder_) sel.erase(sel.begin(), sel.begin() + skip);
  }
  pos0_ += skip;
  T_ -= skip;
  segs_.at(0).n = T_;
  decoder_from_ = pos0_;
  replayed_ = true;
}

}  // namespace dsinfer::model::deepseek_v41::detail

namespace dsinfer::model::deepseek_v41 {

int64_t decoder_first_layer(const ModelConfig& c) {
  DSINFER_CHECK(c.arch == Architecture::kDeepseekV41, "decoder-side bounded replay needs the CED encoder/decoder ",
                "structure of DeepSeek-V4.1 (a last kv source read by every layer after it); ", c.architecture,
                " has none");
  int64_t D = -1;
  for (int64_t L = 0; L < c.num_hidden_layers; ++L) {
    if (c.layer_roles(L).owns_compressor) D = L;
  }
  DSINFER_CHECK(D >= 0, "decoder-side bounded replay: the config has no kv source layer, so no encoder/decoder split");
  for (int64_t L = D; L < c.num_hidden_layers; ++L) {
    const LayerRoles& r = c.layer_roles(L);
    DSINFER_CHECK(r.ratio == 0 || r.kv_source == D, "decoder-side bounded replay: decoder layer ", L,
                  " reads the compressed KV of layer ", r.kv_source, ", not of the first decoder layer ", D);
  }
  return D;
}

}  // namespace dsinfer::model::deepseek_v41
