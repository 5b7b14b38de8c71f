"""Independent plain-PyTorch reference of DeepseekV4ForCausalLM (DeepSeek-V4-Flash), written from
docs/specs/model-v4.md §2 (section numbers in the comments refer to that spec).

One-pass prefill from position 0 over a whole prompt, logits at every position (position-wise
semantics of §2.13), plus the MTP block (§2.12). Computed layer by layer over the whole sequence in
float64 (or float32) on exactly decoded weights.

Numerics (§2.14):
  * "plain" (default): no rounding of activations anywhere, except the KV FP8 QDQ (448 nope dims,
    block 64) and the indexer FP4 QDQ (block 32), which are part of the model (QAT). `kv_qdq=False`
    turns both off. `teacher` (teacher forcing, used by the golden tests): a dict of the vectors a
    candidate engine stored after its own QDQ ("window{L}" [T, head_dim], "comp{L}" [G, head_dim],
    "key{L}" [G, index_dim]); they replace this reference's QDQ results after each is checked to be a
    correct rounding of this reference's own pre-quantization values (see `_teach`).
  * "reference": additionally FP8 QDQ of the activation (block 128) in front of every GEMM whose
    weight is FP8/FP4 in the checkpoint, and bf16 rounding where the official code stores bf16.
    Only statistically comparable (§2.14).
"""
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

import formats
from model_common import (ReferenceCommon, hadamard_matrix, read_shared_fields, rms_norm, rope_base_freqs, rope_tail,
                          sqrt_softplus, topk_lower_index_on_ties, yarn_bounds)
from safetensors_io import Checkpoint


class Config:
    """The fields of a Hugging Face V4 config.json this reference uses (§1.1)."""

    def __init__(self, d):
        read_shared_fields(self, d)
        self.n_shared = d.get("n_shared_experts", 1)
        self.n_hash = d.get("num_hash_layers", 0)
        self.norm_eps = float(d.get("rms_norm_eps", 1e-6))
        self.n_mtp = d.get("num_nextn_predict_layers", 0)
        if d.get("scoring_func", "sqrtsoftplus") != "sqrtsoftplus":
            raise ValueError(f"config.json: scoring_func {d.get('scoring_func')} is not supported (sqrtsoftplus only)")
        if self.n_shared != 1:
            raise ValueError(f"config.json: n_shared_experts must be 1, is {self.n_shared}")
        if len(self.ratios) < self.n_layers + self.n_mtp:
            raise ValueError(f"config.json: compress_ratios has {len(self.ratios)} entries, needs "
                             f"num_hidden_layers + MTP layers = {self.n_layers + self.n_mtp}")
        if self.n_heads % self.o_groups:
            raise ValueError("config.json: num_attention_heads must be divisible by o_groups")

    @staticmethod
    def load(model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            return Config(json.load(f))


# ---------------------------------------------------------------------------------------------
# Small building blocks


def rope_inv_freqs(cfg, ratio):
    """Inverse frequencies f_i (i < rd/2) of one layer (§2.4.1), computed in fp32 as the official
    table is: base 10000 without YaRN for ratio 0, compress_rope_theta with YaRN otherwise."""
    f, base = rope_base_freqs(cfg, ratio)
    if ratio and cfg.original_seq_len > 0:
        low, high = yarn_bounds(cfg, base)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(cfg.rope_dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        f = f / cfg.rope_factor * ramp + f * (1 - ramp)
    return f


# ---------------------------------------------------------------------------------------------


class DeepseekV4Reference(ReferenceCommon):
    def __init__(self, model_dir, dtype=torch.float64, kv_qdq=True, numerics="plain", trace=False, teacher=None):
        if numerics not in ("plain", "reference"):
            raise ValueError(f"numerics must be 'plain' or 'reference', not {numerics}")
        self.cfg = Config.load(model_dir)
        self.ckpt = Checkpoint(model_dir)
        self.dtype = dtype
        self.kv_qdq = kv_qdq
        self.ref = numerics == "reference"
        self.trace = {} if trace else None
        self.teacher = teacher
        self.teacher_stats = {}  # site -> (values, differing from own QDQ, not a nearest rounding, off grid)
        self._head = None
        self._hadamard = hadamard_matrix(self.cfg.index_dim, dtype)

    # --- weights and numerics hooks ------------------------------------------------------------

    def bf(self, x):
        """bf16 storage rounding, only in 'reference' numerics."""
        return formats.round_bf16(x) if self.ref else x

    def lin(self, x, name, out_bf16=True):
        """x @ W^T. In 'reference' numerics: activation FP8 QDQ (block 128) in front of FP8/FP4
        weights and bf16 output where the official GEMM writes bf16."""
        wname = name + ".weight"
        if self.ref and self.ckpt.is_quantized(wname):
            x = formats.fp8_qdq(x, 128)
        y = x @ self.w(wname).T
        return self.bf(y) if out_bf16 else y

    def norm(self, x, name):
        return self.bf(rms_norm(x, self.p(name + ".weight"), self.cfg.norm_eps))

    def kv_fp8(self, x, site=None):
        """FP8 QDQ of the nope dims of KV vectors (§2.10), rope dims untouched."""
        if not self.kv_qdq:
            return x
        rd = self.cfg.rope_dim
        nope = self._teach(site, x[..., :-rd], 64, formats.fp8_qdq)
        return torch.cat([nope, x[..., -rd:]], dim=-1)

    def idx_fp4(self, x, site=None):
        return self._teach(site, x, 32, formats.fp4_qdq) if self.kv_qdq else x

    def _teach(self, site, x, block, qdq):
        """qdq(x, block), or with a teacher the teacher's checked values for `site` (_teacher_or_own;
        measured: truncation instead of RNE, FP4 block 16 are refused). KV: the teacher's rope dims are
        not quantized; ours are used."""
        return self._teacher_or_own(site, x, qdq(x, block), block, lambda d: qdq(d, block) != d,
                                    trim_to_x=site is not None and not site.startswith("key"))

    def rot(self, x, angles):
        """RoPE on the last rope_dim dims (bf16 result in 'reference' numerics, as the official in-place rotation)."""
        return self.bf(rope_tail(x, angles, self.cfg.rope_dim))

    def angles(self, positions, ratio):
        f = rope_inv_freqs(self.cfg, ratio).to(self.dtype)
        return positions.to(self.dtype)[:, None] * f[None, :]

    # --- mHC (§2.3; hc_mix, hc_pre, hc_post: model_common) ---------------------------------------------

    def hc_head(self, X, prefix):
        cfg = self.cfg
        m = self.hc_logits(X, prefix + "hc_head_fn")
        pre = torch.sigmoid(m * self.p(prefix + "hc_head_scale") + self.p(prefix + "hc_head_base")) + cfg.hc_eps
        return self.bf(self.hc_pre(X, pre))

    # --- compressor (§2.6) -------------------------------------------------------------------------

    def compressor(self, a, prefix, ratio, width):
        """Compressed entries [T // ratio, width] of a whole sequence starting at position 0:
        pooled, (bf16 in 'reference'), RMSNorm, RoPE at position g*ratio. Quantization is left to the caller."""
        T = a.shape[0]
        G = T // ratio
        overlap = ratio == 4
        c = 2 if overlap else 1
        positions = torch.arange(T)
        u = self.lin(a, prefix + "wkv", out_bf16=False)
        s = self.lin(a, prefix + "wgate", out_bf16=False) + self.p(prefix + "ape")[positions % ratio]
        if u.shape[1] != c * width:
            raise ValueError(f"{prefix}wkv has {u.shape[1]} outputs, expected {c * width}")
        if G == 0:
            return a.new_zeros(0, width)
        u = u[:G * ratio].view(G, ratio, c * width)
        s = s[:G * ratio].view(G, ratio, c * width)
        if overlap:
            # Entry g pools the A-half (first `width` channels) of group g-1 and the B-half of group g;
            # group -1 does not exist (value 0, score -inf).
            prev_u = torch.cat([u.new_zeros(1, ratio, width), u[:-1, :, :width]], dim=0)
            prev_s = torch.cat([s.new_full((1, ratio, width), float("-inf")), s[:-1, :, :width]], dim=0)
            u = torch.cat([prev_u, u[:, :, width:]], dim=1)
            s = torch.cat([prev_s, s[:, :, width:]], dim=1)
        z = (torch.softmax(s, dim=1) * u).sum(dim=1)
        z = self.norm(self.bf(z), prefix + "norm")
        # RoPE at the first position of the entry's own group, with the layer's (compressed) table.
        return self.rot(z, self.angles(torch.arange(G) * ratio, ratio))

    # --- indexer (§2.7.2) ----------------------------------------------------------------------

    def indexer(self, a, qr, prefix, ang, L):
        cfg = self.cfg
        T = a.shape[0]
        ratio = 4
        keys = self.compressor(a, prefix + "compressor.", ratio, cfg.index_dim)
        keys = self.bf(self.idx_fp4(self.bf(keys @ self._hadamard), f"key{L}"))
        G = keys.shape[0]
        qi = self.lin(qr, prefix + "wq_b").view(T, cfg.index_heads, cfg.index_dim)
        qi = self.rot(qi, ang[:, None, :])
        qi = self.bf(self.idx_fp4(self.bf(qi @ self._hadamard)))
        w = self.lin(a, prefix + "weights_proj") * (cfg.index_dim ** -0.5 * cfg.index_heads ** -0.5)
        dots = torch.einsum("thd,gd->thg", qi, keys)
        score = (torch.relu(dots) * w[:, :, None]).sum(dim=1)  # [T, G]
        visible = torch.arange(G)[None, :] < ((torch.arange(T) + 1) // ratio)[:, None]
        score = score.masked_fill(~visible, float("-inf"))
        k = min(cfg.index_topk, G)
        selected = torch.zeros(T, G, dtype=torch.bool)
        if k > 0:
            top = topk_lower_index_on_ties(score, k)
            selected.scatter_(1, top, True)
        selected &= visible  # fewer than topk visible: all visible ones
        self._record(f"layer{L}.index_score", score)
        self._record(f"layer{L}.index_selected", selected)
        return selected

    # --- attention (§2.4 - §2.9) ------------------------------------------------------------------

    def attention(self, a, prefix, L, positions):
        cfg = self.cfg
        T = a.shape[0]
        nh, hd = cfg.n_heads, cfg.head_dim
        ratio = cfg.ratios[L]
        ang = self.angles(positions, ratio)

        qr = self.norm(self.lin(a, prefix + "wq_a"), prefix + "q_norm")
        q = self.lin(qr, prefix + "wq_b").view(T, nh, hd)
        q = self.bf(q * torch.rsqrt(q.square().mean(-1, keepdim=True) + cfg.norm_eps))
        q = self.rot(q, ang[:, None, :])

        kv = self.norm(self.lin(a, prefix + "wkv"), prefix + "kv_norm")
        kv = self.kv_fp8(self.rot(kv, ang), f"window{L}")

        pq = positions[:, None]
        pk = positions[None, :]
        mask_win = (pk <= pq) & (pk > pq - cfg.window)
        keys, mask = kv, mask_win
        if ratio:
            # Compressed positions are relative to the sequence start: this reference always
            # prefills from position 0 (positions == arange(T)).
            comp = self.kv_fp8(self.compressor(a, prefix + "compressor.", ratio, hd), f"comp{L}")
            G = comp.shape[0]
            visible = torch.arange(G)[None, :] < ((positions + 1) // ratio)[:, None]
            if ratio == 4:
                mask_comp = self.indexer(a, qr, prefix + "indexer.", ang, L) & visible
            else:
                mask_comp = visible
            keys = torch.cat([kv, comp], dim=0)
            mask = torch.cat([mask_win, mask_comp], dim=1)
            self._record(f"layer{L}.compressed_kv", comp)

        # Sink-softmax core (§2.9): the sink is an extra logit whose value vector is zero.
        logits = torch.einsum("thd,jd->thj", q, keys) * hd ** -0.5
        logits = logits.masked_fill(~mask[:, None, :], float("-inf"))
        sink = self.p(prefix + "attn_sink")
        logits = torch.cat([logits, sink[None, :, None].expand(T, nh, 1)], dim=-1)
        probs = torch.softmax(logits, dim=-1)[..., :-1]
        o = self.bf(torch.einsum("thj,jd->thd", self.bf(probs), keys))

        # Undo the query rotation (angle -theta(p)), then the grouped low-rank output.
        o = self.rot(o, -ang[:, None, :])
        g = cfg.o_groups
        o = o.reshape(T, g, (nh // g) * hd)
        wo_a = self.bf(self.w(prefix + "wo_a.weight")).view(g, cfg.o_lora, (nh // g) * hd)
        r = self.bf(torch.einsum("tgi,gri->tgr", o, wo_a))
        return self.lin(r.reshape(T, g * cfg.o_lora), prefix + "wo_b")

    # --- MoE (§2.11) ---------------------------------------------------------------------------------

    def swiglu(self, x, prefix, weight=None):
        lim = self.cfg.swiglu_limit
        g = self.lin(x, prefix + "w1", out_bf16=False)
        u = self.lin(x, prefix + "w3", out_bf16=False)
        if self.ref:
            g, u = self.bf(g), self.bf(u)
        if lim > 0:
            u = torch.clamp(u, -lim, lim)
            g = torch.clamp(g, max=lim)
        h = F.silu(g) * u
        if weight is not None:
            h = weight * h
        return self.lin(self.bf(h), prefix + "w2")

    def moe(self, x, ids, prefix, L):
        cfg = self.cfg
        logits = x @ self.w(prefix + "gate.weight").T
        sig = sqrt_softplus(logits)
        if L < cfg.n_hash:
            table = self.ckpt.raw(prefix + "gate.tid2eid")
            sel = torch.from_numpy(np.asarray(table[ids.numpy()], dtype=np.int64))
            if bool(((sel < 0) | (sel >= cfg.n_experts)).any()):
                raise ValueError(f"{prefix}gate.tid2eid holds expert ids outside [0, {cfg.n_experts})")
        else:
            sel = topk_lower_index_on_ties(sig + self.p(prefix + "gate.bias"), cfg.topk)
        weights = sig.gather(1, sel)
        weights = weights / weights.sum(dim=-1, keepdim=True) * cfg.route_scale
        self._record(f"layer{L}.experts", sel)
        self._record(f"layer{L}.route_weights", weights)
        return self.bf(self.experts(x, sel, weights, prefix))

    # --- blocks and model -----------------------------------------------------------------------------

    def block(self, X, ids, prefix, L, positions):
        pre, post, comb = self.hc_mix(X, prefix + "hc_attn")
        a = self.norm(self.bf(self.hc_pre(X, pre)), prefix + "attn_norm")
        X = self.bf(self.hc_post(self.attention(a, prefix + "attn.", L, positions), X, post, comb))
        pre, post, comb = self.hc_mix(X, prefix + "hc_ffn")
        f = self.norm(self.bf(self.hc_pre(X, pre)), prefix + "ffn_norm")
        X = self.bf(self.hc_post(self.moe(f, ids, prefix + "ffn.", L), X, post, comb))
        self._record(f"layer{L}.out", X)
        return X

    def logits_from_state(self, X, prefix):
        y = self.norm(self.hc_head(X, prefix), prefix + "norm")
        return y @ self.head().T

    def forward(self, ids):
        """Returns (logits [T, vocab], final 4-stream state [T, hc, d]) for a prompt from position 0."""
        ids = self._check_ids(ids)
        T = ids.numel()
        positions = torch.arange(T)
        X = self.bf(self.embed(ids))[:, None, :].repeat(1, self.cfg.hc, 1)
        for L in range(self.cfg.n_layers):
            X = self.block(X, ids, f"layers.{L}.", L, positions)
        return self.logits_from_state(X, ""), X

    def mtp(self, X_main, ids):
        """MTP logits [T-1, vocab] (§2.12, §2.14 item 13): row p is built from the final 4-stream
        state at position p and token p+1 (predicts token p+2), at RoPE position p."""
        cfg = self.cfg
        if cfg.n_mtp < 1:
            raise ValueError("config.json: num_nextn_predict_layers is 0; the model has no MTP block")
        ids = self._check_ids(ids)
        T = ids.numel()
        if T < 2:  # no row has a next token
            return torch.zeros(0, cfg.vocab, dtype=self.dtype)
        pre = "mtp.0."
        L = cfg.n_layers
        nxt = ids[1:]
        e = self.norm(self.bf(self.embed(nxt)), pre + "enorm")
        h = self.norm(X_main[:T - 1], pre + "hnorm")  # per stream
        X = self.bf(self.lin(e, pre + "e_proj")[:, None, :] + self.lin(h, pre + "h_proj"))
        X = self.block(X, nxt, pre, L, torch.arange(T - 1))
        return self.logits_from_state(X, pre)
