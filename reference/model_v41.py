"""Independent plain-PyTorch reference of DeepseekV41ForCausalLM (DeepSeek-V4.1-Flash), written from
docs/specs/model-v41.md (section numbers in the comments refer to it; "V4 §" to model-v4.md).

One-pass prefill from position 0 over a whole prompt, logits at every position, computed layer by
layer over the whole sequence in float64 (or float32) on exactly decoded weights; plus the DSpark draft
head (§2.12) teacher-forced at every position.

Numerics (§2.14):
  * "plain" (default): no rounding of activations anywhere except the three QDQ steps that are part of
    the model (§2.10): window KV FP8 E4M3 over all dims in blocks of 32 (power-of-two scales), compressed
    KV FP4 E2M1 in blocks of 16 with E4M3 scales, index queries/keys FP4 in blocks of 32 (power-of-two
    scales). `kv_qdq=False` turns all three off.
  * "reference": the official V4.1 inference code's activation rounding (its inference/model.py, read in
    the vendored copy named in NOTES.md): FP8 E4M3 QDQ in blocks of 32 with power-of-two scales in front
    of every GEMM whose weight is FP8/FP4 (the official `linear()` quantizes exactly those), and bf16
    wherever the official code stores bf16 (GEMM outputs, norms, RoPE, stream states, MoE and Engram
    outputs, index scores, attention probabilities and output). Each op is computed exactly, then rounded
    once, so this is the official numerics to within rounding order: statistical comparisons only. The
    main forward only (`dspark` refuses it).
`teacher` (teacher forcing, the golden tests, as V4's): a
dict of the stored QDQ'd vectors of `dsinfer logits --dump-kv` (window{L} [T, hd], comp{L} [G, hd],
key{L} [G, index_dim] for layer L; with the draft head ring{s} [T, hd] and block{s} [(T-1) * block, hd]
for DSpark stage s); each is checked to be a correct rounding of this reference's own
pre-QDQ values (or on a rounding boundary) and on the grid, then used instead of the own QDQ result;
`teacher_stats[site]` = (values, differing from the own QDQ, not a nearest rounding, off grid).

Small shared pieces (RMSNorm, mHC with Sinkhorn, interleaved RoPE, sqrt-softplus, top-k with ties to the
lower index, the expert sum, the teacher check) are the V4 reference's, in model_common.py: the spec says
they are unchanged (§2.3, §2.4.1, §2.11).
"""
import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

import engram_v41
import formats
from model_common import (ReferenceCommon, field_reader, read_shared_fields, rms_norm, rope_base_freqs, rope_tail,
                          sqrt_softplus, topk_lower_index_on_ties, yarn_bounds)
from safetensors_io import Checkpoint


class ConfigV41:
    """The fields of a V4.1 config.json this reference uses (§1.1): text_config read as top level."""

    def __init__(self, top):
        d = dict(top.get("text_config", {}))
        for k, v in top.items():
            if k not in ("text_config", "vision_config"):
                d.setdefault(k, v)
        arch = (d.get("architectures") or [""])[0]
        if arch != "DeepseekV41ForCausalLM":
            raise ValueError(f"config.json: architectures[0] is {arch!r}, not DeepseekV41ForCausalLM")

        need = field_reader(d)
        read_shared_fields(self, d)
        self.kv_sources = list(need("kv_source_layer_ids"))
        self.index_sources = list(need("index_source_layer_ids"))
        self.cand_source = d.get("candidate_source_layer_id", -1)
        self.cand_blocks = d.get("candidate_topk_blocks", 0)
        self.cand_block = d.get("candidate_block_size", 0)
        self.norm_topk = bool(d.get("norm_topk_prob", True))
        self.gate_temp = float(d.get("gate_temp", 1.0))
        self.norm_eps = float(need("rms_norm_eps"))
        self.engram_layers = list(d.get("engram_layer_ids", []))
        if self.engram_layers:
            self.engram_rows = list(need("engram_num_embeddings"))
            self.engram_n = need("engram_max_ngram_size")
            self.engram_vocab = need("engram_vocab_size")
            self.engram_heads = need("engram_n_heads")
            self.engram_dim = need("engram_head_dim")
            self.engram_pad = need("engram_pad_token_id")
            self.engram_cvs = need("engram_compressed_vocab_size")
        self.n_mtp = len(self.ratios) - self.n_layers
        self.dspark_block = d.get("dspark_block_size", 0)
        if self.n_mtp > 0:
            self.dspark_noise = need("dspark_noise_token_id")
            self.dspark_targets = sorted(need("dspark_target_layer_ids"))  # concatenated in layer order (§2.1)
            self.dspark_experts = d.get("dspark_n_routed_experts", self.n_experts)
            self.dspark_topk = d.get("dspark_num_experts_per_tok", self.topk)
        if d.get("n_shared_experts", 1) != 1:
            raise ValueError("config.json: n_shared_experts must be 1")
        bs = (d.get("quantization_config") or {}).get("weight_block_size", [32, 32])
        self.fp8_block = int(bs[0])
        # The official model.py has one constant (fp8_block_size = 32) for the weight blocks and the
        # activation quantization blocks of its 'reference' numerics.
        self.act_block = self.fp8_block

    def src(self, L):
        """The most recent kv source at or before L (§1.3), or -1."""
        return max([s for s in self.kv_sources if s <= L], default=-1)

    def isrc(self, L):
        return max([s for s in self.index_sources if s <= L], default=-1)

    @staticmethod
    def load(model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            return ConfigV41(json.load(f))


def rope_inv_freqs_v41(cfg, ratio):
    """§2.4.1: fp32 table; ratio 0 (and DSpark stages) base rope_theta without YaRN, compressed layers
    compress_rope_theta with YaRN; ramp denominator max(high - low, 0.001)."""
    f, base = rope_base_freqs(cfg, ratio)
    if ratio and cfg.original_seq_len > 0:
        low, high = yarn_bounds(cfg, base)
        ramp = torch.clamp((torch.arange(cfg.rope_dim // 2, dtype=torch.float32) - low) / max(high - low, 0.001), 0, 1)
        s = 1 - ramp
        f = (f / cfg.rope_factor) * (1 - s) + f * s
    return f


def e4m3_block_scale(x, block):
    """§2.10 the E4M3 scale of each block of x: E4M3_RNE(max(amax, 6*2^-9) / 6), amax and the division in
    fp32, saturating at 448."""
    amax = x.reshape(*x.shape[:-1], x.shape[-1] // block, block).abs().amax(dim=-1, keepdim=True).to(torch.float32)
    amax = torch.clamp(amax, min=6.0 * 2.0 ** -9)
    return formats.round_e4m3(torch.clamp(amax / torch.tensor(6.0, dtype=torch.float32), max=448.0)).to(x.dtype)


def fp4_qdq_e4m3_scale(x, block=16):
    """§2.10 compressed KV: FP4 E2M1 per block with a full E4M3 scale (e4m3_block_scale)."""
    shape = x.shape
    xb = x.reshape(*shape[:-1], shape[-1] // block, block)
    s = e4m3_block_scale(x, block)
    q = formats.round_e2m1(torch.clamp(xb / s, -6.0, 6.0))
    return (q * s).reshape(shape)


def fp4_e4m3_scale_on_grid(d, x, block=16):
    """Whether each value of d is an E2M1 value times the block's E4M3 scale computed from x (as
    fp4_qdq_e4m3_scale does)."""
    shape = x.shape
    q = d.reshape(*shape[:-1], shape[-1] // block, block) / e4m3_block_scale(x, block)
    return ((formats.round_e2m1(q) == q) & (q.abs() <= 6.0)).reshape(shape)


class DeepseekV41Reference(ReferenceCommon):
    ref = False  # 'reference' numerics; bare instances (the unit tests) compute plain

    def __init__(self, model_dir, dtype=torch.float64, kv_qdq=True, trace=False, teacher=None, numerics="plain"):
        if numerics not in ("plain", "reference"):
            raise ValueError(f"numerics must be 'plain' or 'reference', not {numerics}")
        self.ref = numerics == "reference"
        self._quantized_sites = set()  # the GEMMs whose input 'reference' numerics quantized (by weight name)
        self.cfg = ConfigV41.load(model_dir)
        self.teacher = teacher
        self.teacher_stats = {}
        self.ckpt = Checkpoint(model_dir, fp8_block=self.cfg.fp8_block)
        self.dtype = dtype
        self.kv_qdq = kv_qdq
        self.trace = {} if trace else None
        self._head = None
        cfg = self.cfg
        if cfg.engram_layers:
            self.token_map = engram_v41.load_token_map(model_dir, cfg.engram_cvs)
            self.primes = engram_v41.bucket_primes(cfg.engram_vocab, len(cfg.engram_layers), cfg.engram_n,
                                                   cfg.engram_heads)
            for k, p in enumerate(self.primes):
                if sum(p) != cfg.engram_rows[k]:
                    raise ValueError(f"config.json: engram_num_embeddings[{k}] = {cfg.engram_rows[k]} is not the "
                                     f"sum of the layer's bucket primes, {sum(p)}")
            self.mults = [engram_v41.multipliers(L, cfg.engram_cvs, cfg.engram_n) for L in cfg.engram_layers]

    # --- weights and QDQ (w, p, embed, head: model_common) -----------------------------------------

    def bf(self, x):
        """bf16 storage rounding, only in 'reference' numerics."""
        return formats.round_bf16(x) if self.ref else x

    def lin(self, x, name, out_bf16=True):
        """x @ W^T. In 'reference' numerics as the official `linear()`: an FP8/FP4 weight gets its input
        FP8-QDQ'd in blocks of the activation block (32, power-of-two scales); the product is stored bf16
        unless out_bf16=False (the fp32 GEMMs: ratio-2 compressor, gate)."""
        wname = name + ".weight"
        if self.ref and self.ckpt.is_quantized(wname):
            x = formats.fp8_qdq(x, self.cfg.act_block)
            self._quantized_sites.add(name)
        y = x @ self.w(wname).T
        return self.bf(y) if out_bf16 else y

    def norm(self, x, name):
        return self.bf(rms_norm(x, self.p(name + ".weight"), self.cfg.norm_eps))

    def angles(self, positions, ratio):
        f = rope_inv_freqs_v41(self.cfg, ratio).to(self.dtype)
        return positions.to(self.dtype)[:, None] * f[None, :]

    def rot(self, x, angles):
        """RoPE on the last rope_dim dims (bf16 in 'reference' numerics: the official in-place rotation)."""
        return self.bf(rope_tail(x, angles, self.cfg.rope_dim))

    def win_qdq(self, x, site=None):
        return self._teach(site, x, 32, lambda v: formats.fp8_qdq(v, 32)) if self.kv_qdq else x

    def ckv_qdq(self, x, site=None):
        return self._teach(site, x, 16, fp4_qdq_e4m3_scale, on_grid=fp4_e4m3_scale_on_grid) if self.kv_qdq else x

    def idx_qdq(self, x, site=None):
        return self._teach(site, x, 32, lambda v: formats.fp4_qdq(v, 32)) if self.kv_qdq else x

    def _teach(self, site, x, block, qdq, on_grid=None):
        """qdq(x), or with a teacher the teacher's values for `site`, checked as V4's reference does
        (_teacher_or_own); on the grid: power-of-two scales, a QDQ of it changes nothing; E4M3 scales,
        not idempotent: on the E2M1 grid of our own block scale."""
        off_grid = (lambda d: ~on_grid(d, x)) if on_grid else (lambda d: qdq(d) != d)
        return self._teacher_or_own(site, x, qdq(x), block, off_grid)

    # (mHC §2.3, deferred mixing §2.2: hc_mix, hc_pre, hc_post are model_common's.)

    # --- Engram (§2.15) ---------------------------------------------------------------------------

    def engram(self, X, ids, L):
        cfg = self.cfg
        k = cfg.engram_layers.index(L)
        prefix = f"layers.{L}.engram."
        T, hc, d = X.shape
        cids = self.token_map[ids.numpy()]
        pad = int(self.token_map[cfg.engram_pad])
        rows = engram_v41.hash_ids(cids, pad, self.mults[k], self.primes[k], cfg.engram_heads)  # [T, C]
        self._record(f"layer{L}.engram_rows", torch.from_numpy(rows))
        flat = rows.reshape(-1)
        # Lazy row reads from the mapped table (never the whole table): E4M3 value x per-32-column E8M0.
        vals = formats.decode_e4m3(np.ascontiguousarray(self.ckpt.raw(prefix + "embed.weight")[flat]))
        scl = formats.decode_e8m0(np.ascontiguousarray(self.ckpt.raw(prefix + "embed.scale")[flat]))
        e = vals.astype(np.float64).reshape(len(flat), -1, 32) * scl.astype(np.float64)[:, :, None]
        e = torch.from_numpy(e.reshape(T, -1)).to(self.dtype)  # [T, C * engram_dim], column order (n-gram, head)
        kv = self.lin(e, prefix + "wkv")  # [T, (hc + 1) d]
        keys = kv[:, :hc * d].view(T, hc, d)
        value = kv[:, hc * d:]
        omega = self.p(prefix + "q_weight") * self.p(prefix + "k_weight")  # [hc, d]
        eps = cfg.norm_eps
        rho = torch.rsqrt(X.square().mean(-1) + eps) * torch.rsqrt(keys.square().mean(-1) + eps)  # [T, hc]
        dot = (X * omega[None] * keys).sum(-1) * rho / math.sqrt(d)
        sign = torch.where(torch.signbit(dot), -1.0, 1.0).to(self.dtype)
        g = torch.sigmoid(sign * torch.sqrt(torch.clamp(dot.abs(), min=1e-6)))
        self._record(f"layer{L}.engram_gate", g)
        return self.bf(X + g[:, :, None] * value[:, None, :])

    # --- compressor, indexer, candidates (§2.6 - §2.8) ---------------------------------------------

    def compress(self, a, prefix, ratio, L=None):
        """(compressed KV [G, hd], index keys [G, index_dim]) of a kv source over the whole sequence."""
        T = a.shape[0]
        G = T // ratio
        # Official numerics: ratio 2 runs wkv/wgate and the pooling in fp32 and stores the pooled vector
        # bf16; ratio 1 is a bf16 product.
        u = self.lin(a, prefix + "compressor.wkv", out_bf16=ratio != 2)
        if ratio == 2:
            s = self.lin(a, prefix + "compressor.wgate", out_bf16=False)
            z = self.bf((torch.softmax(s[:2 * G].view(G, 2, -1), dim=1) * u[:2 * G].view(G, 2, -1)).sum(dim=1))
        else:
            z = u
        latent = self.norm(z, prefix + "compressor.norm")  # pre-RoPE latent
        ang = self.angles(torch.arange(G) * ratio, ratio)
        ik = self.norm(self.lin(latent, prefix + "indexer.wk"), prefix + "indexer.k_norm")
        ik = self.idx_qdq(self.rot(ik, ang), None if L is None else f"key{L}")
        ckv = self.ckv_qdq(self.rot(latent, ang), None if L is None else f"comp{L}")
        return ckv, ik

    def index_scores(self, a, qr, prefix, ang, ik, ratio):
        cfg = self.cfg
        T = a.shape[0]
        G = ik.shape[0]
        qi = self.lin(qr, prefix + "indexer.wq_b").view(T, cfg.index_heads, cfg.index_dim)
        qi = self.idx_qdq(self.rot(qi, ang[:, None, :]))
        w = self.bf(self.lin(a, prefix + "indexer.weights_proj") * (cfg.index_dim ** -0.5 * cfg.index_heads ** -0.5))
        # Official numerics: a bf16 einsum, product and head sum (many exact ties; lower index wins).
        dots = self.bf(torch.einsum("thd,gd->thg", qi, ik))
        score = self.bf(self.bf(torch.relu(dots) * w[:, :, None]).sum(dim=1))  # [T, G]
        visible = torch.arange(G)[None, :] < ((torch.arange(T) + 1) // ratio)[:, None]
        return score.masked_fill(~visible, float("-inf")), visible

    def candidate_mask(self, score, visible):
        """§2.8 at the candidate source: per query, the K best blocks of B positions by max score, the
        block of the newest visible position always kept, blocks without a visible position dropped."""
        cfg = self.cfg
        T, G = score.shape
        B, K = cfg.cand_block, cfg.cand_blocks
        NB = (G + B - 1) // B
        padded = torch.full((T, NB * B), float("-inf"), dtype=score.dtype)
        padded[:, :G] = score
        bscore = padded.view(T, NB, B).amax(dim=-1)
        n = visible.sum(dim=1)  # visible entries per query
        newest = torch.clamp(n - 1, min=0) // B
        has = n > 0
        bscore[has, newest[has]] = float("inf")
        keep = torch.zeros(T, NB, dtype=torch.bool)
        if NB > 0:
            keep.scatter_(1, topk_lower_index_on_ties(bscore, min(K, NB)), True)
        keep &= (torch.arange(NB)[None, :] * B) < n[:, None]
        return keep.repeat_interleave(B, dim=1)[:, :G] & visible

    def select(self, score, visible):
        G = score.shape[1]
        k = min(self.cfg.index_topk, G)
        sel = torch.zeros_like(visible)
        if k > 0:
            sel.scatter_(1, topk_lower_index_on_ties(score, k), True)
        return sel & visible & torch.isfinite(score)

    # --- attention (§2.4, §2.5, §2.7, §2.9) ---------------------------------------------------------

    def attention(self, a, prefix, L, positions, state):
        cfg = self.cfg
        T = a.shape[0]
        nh, hd = cfg.n_heads, cfg.head_dim
        ratio = cfg.ratios[L]
        ang = self.angles(positions, ratio)
        qr = self.norm(self.lin(a, prefix + "wq_a"), prefix + "q_norm")
        q = self.rot(self.lin(qr, prefix + "wq_b").view(T, nh, hd), ang[:, None, :])  # no per-head q norm
        kv = self.win_qdq(self.rot(self.norm(self.lin(a, prefix + "wkv"), prefix + "kv_norm"), ang), f"window{L}")
        pq, pk = positions[:, None], positions[None, :]
        keys, mask = kv, (pk <= pq) & (pk > pq - cfg.window)
        if ratio:
            if L in cfg.kv_sources:
                state["kv"][L] = self.compress(a, prefix, ratio, L)
            ckv, ik = state["kv"][cfg.src(L)]
            if L in cfg.index_sources:
                score, visible = self.index_scores(a, qr, prefix, ang, ik, ratio)
                if L == cfg.cand_source:
                    state["cand"] = self.candidate_mask(score, visible)
                elif cfg.cand_source >= 0 and L > cfg.cand_source:
                    score = score.masked_fill(~state["cand"], float("-inf"))
                state["sel"][L] = self.select(score, visible)
                self._record(f"layer{L}.index_score", score)
                self._record(f"layer{L}.index_selected", state["sel"][L])
            sel = state["sel"][cfg.isrc(L)]
            keys = torch.cat([kv, ckv], dim=0)
            mask = torch.cat([mask, sel], dim=1)
        logits = torch.einsum("thd,jd->thj", q, keys) * hd ** -0.5
        logits = logits.masked_fill(~mask[:, None, :], float("-inf"))
        sink = self.p(prefix + "attn_sink")
        if self.ref:
            o = self.sparse_attn_bf16(logits, keys, sink)
        else:
            probs = torch.softmax(torch.cat([logits, sink[None, :, None].expand(T, nh, 1)], dim=-1), dim=-1)[..., :-1]
            o = torch.einsum("thj,jd->thd", probs, keys)
        o = self.rot(o, -ang[:, None, :])
        return self.out_proj(o, prefix)

    def sparse_attn_bf16(self, logits, keys, sink):
        """The official sparse_attn kernel's numerics: unnormalised probabilities exp(s - max) (max over the
        attended entries, the sink outside it) rounded to bf16 before the product with the values, their
        unrounded sum plus exp(sink - max) as the denominator, the output stored bf16. (The kernel takes the
        max over blocks of 64 entries as it goes; rounding relative to the final max differs only in which
        values round which way.)"""
        m = logits.amax(dim=-1, keepdim=True)  # finite: a query always attends to its own position
        p = torch.exp(logits - m)
        den = p.sum(dim=-1, keepdim=True) + torch.exp(sink[None, :, None] - m)
        return self.bf(torch.einsum("thj,jd->thd", self.bf(p), keys) / den)

    def out_proj(self, o, prefix):
        cfg = self.cfg
        T, nh, hd = o.shape
        g = cfg.o_groups
        # Official: wo_a dequantized to bf16 at conversion, a bf16 grouped product without activation QDQ.
        wo_a = self.bf(self.w(prefix + "wo_a.weight")).view(g, cfg.o_lora, (nh // g) * hd)
        r = self.bf(torch.einsum("tgi,gri->tgr", o.reshape(T, g, (nh // g) * hd), wo_a))
        return self.lin(r.reshape(T, g * cfg.o_lora), prefix + "wo_b")

    # --- MoE (§2.11) ---------------------------------------------------------------------------------

    def swiglu(self, x, prefix, weight=None):
        lim = self.cfg.swiglu_limit
        g = self.lin(x, prefix + "w1")
        u = self.lin(x, prefix + "w3")
        if lim > 0:
            u = torch.clamp(u, -lim, lim)
            g = torch.clamp(g, max=lim)
        h = F.silu(g) * u
        if weight is not None:
            h = weight * h
        return self.lin(self.bf(h), prefix + "w2")

    def moe(self, x, prefix, topk):
        cfg = self.cfg
        sig = sqrt_softplus((x @ self.w(prefix + "gate.weight").T) / cfg.gate_temp)
        sel = topk_lower_index_on_ties(sig + self.p(prefix + "gate.bias"), topk)  # text only: never bias_vl
        weights = sig.gather(1, sel)
        if cfg.norm_topk and topk > 1:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        weights = weights * cfg.route_scale
        return self.bf(self.experts(x, sel, weights, prefix))

    # --- blocks and model -------------------------------------------------------------------------------

    def block(self, X, pre_in, prefix, attn_fn, topk):
        """§2.2: the attention collapses with the previous sub-layer's pre, the FFN with this block's
        attention pre (computed before the attention); returns (X, this block's FFN pre)."""
        pre_a, post_a, comb_a = self.hc_mix(X, prefix + "hc_attn")
        a = self.norm(self.bf(self.hc_pre(X, pre_in)), prefix + "attn_norm")
        X = self.bf(self.hc_post(attn_fn(a), X, post_a, comb_a))
        pre_f, post_f, comb_f = self.hc_mix(X, prefix + "hc_ffn")
        f = self.norm(self.bf(self.hc_pre(X, pre_a)), prefix + "ffn_norm")
        X = self.bf(self.hc_post(self.moe(f, prefix + "ffn.", topk), X, post_f, comb_f))
        return X, pre_f

    def one_hot_pre(self, T):
        pre = torch.zeros(T, self.cfg.hc, dtype=self.dtype)
        pre[:, 0] = 1
        return pre

    def forward(self, ids):
        """(logits [T, vocab], DSpark taps {layer: [T, d]}) for a prompt from position 0 (§2.1)."""
        cfg = self.cfg
        ids = self._check_ids(ids)
        T = ids.numel()
        positions = torch.arange(T)
        X = self.embed(ids)[:, None, :].repeat(1, cfg.hc, 1)
        pre_in = self.one_hot_pre(T)
        state = {"kv": {}, "sel": {}, "cand": None}
        taps = {}
        for L in range(cfg.n_layers):
            prefix = f"layers.{L}."
            if L in cfg.engram_layers:
                X = self.engram(X, ids, L)
            if cfg.n_mtp and L in cfg.dspark_targets:
                taps[L] = self.bf(X.mean(dim=1))
            X, pre_in = self.block(X, pre_in, prefix,
                                   lambda a, L=L, prefix=prefix: self.attention(a, prefix + "attn.", L, positions, state),
                                   cfg.topk)
            self._record(f"layer{L}.out", X)
        y = self.norm(self.bf(self.hc_pre(X, pre_in)), "norm")
        return y @ self.head().T, taps  # the official head: fp32 weights on the bf16 norm output

    # --- DSpark (§2.12) ----------------------------------------------------------------------------

    def dspark(self, taps, ids):
        """Teacher-forced draft rounds, all at once: for every p < T-1 the round after the target
        processed p with anchor ids[p+1] (rounds are independent of each other). Returns (logits
        [T-1, block, vocab] of draft k given the greedy o_k, drafts [T-1, block] greedy, confidence
        logits [T-1, block])."""
        cfg = self.cfg
        if self.ref:
            raise ValueError("the DSpark head is computed in plain numerics only")
        ids = self._check_ids(ids)
        T = ids.numel()
        P, B, V = max(T - 1, 0), cfg.dspark_block, cfg.vocab
        if P == 0:
            return (torch.zeros(0, B, V, dtype=self.dtype), torch.zeros(0, B, dtype=torch.int64),
                    torch.zeros(0, B, dtype=self.dtype))
        last = f"mtp.{cfg.n_mtp - 1}."
        main_hidden = torch.cat([taps[L] for L in cfg.dspark_targets], dim=-1)
        main_x = self.norm(self.lin(main_hidden, "mtp.0.main_proj"), "mtp.0.main_norm")  # [T, d]
        ang_all = self.angles(torch.arange(T + B), 0)
        rings = []
        for s in range(cfg.n_mtp):
            pre = f"mtp.{s}.attn."
            rings.append(self.win_qdq(self.rot(self.norm(self.lin(main_x, pre + "wkv"), pre + "kv_norm"), ang_all[:T]),
                                      f"ring{s}"))  # teacher site: dsinfer logits --dump-kv PREFIX.ring<s>.npy
        anchors = ids[1:]
        block = torch.full((P, B), cfg.dspark_noise, dtype=torch.int64)
        block[:, 0] = anchors
        bpos = torch.arange(P)[:, None] + 1 + torch.arange(B)[None, :]  # [P, B]: positions p+1 .. p+B
        X = self.embed(block.reshape(-1))[:, None, :].repeat(1, cfg.hc, 1)  # [P*B, hc, d]
        pre_in = self.one_hot_pre(P * B)
        for s in range(cfg.n_mtp):
            pre = f"mtp.{s}."
            X, pre_in = self.block(X, pre_in, pre,
                                   lambda a, s=s, pre=pre: self.stage_attention(a, pre + "attn.", rings[s], ang_all, bpos,
                                                                                f"block{s}"),
                                   cfg.dspark_topk)
        h = self.hc_pre(X, pre_in).view(P, B, -1)
        U = self.norm(h, last + "norm") @ self.head().T  # [P, B, V]
        mk_head = self.w(last + "markov_head.head.weight")  # [V, rank]
        conf_w = self.w(last + "confidence_head.proj.weight")[0]  # [d + rank]
        drafts = torch.zeros(P, B, dtype=torch.int64)
        conf = torch.zeros(P, B, dtype=self.dtype)
        o = anchors.clone()
        for k in range(B):
            emb = torch.from_numpy(self.ckpt.plain(last + "markov_head.embed.weight", rows=o.numpy())
                                   .astype(np.float64)).to(self.dtype)  # [P, rank]
            U[:, k] += emb @ mk_head.T
            conf[:, k] = torch.cat([h[:, k], emb], dim=-1) @ conf_w
            o = torch.argmax(U[:, k], dim=-1)  # greedy; exact ties: the lowest id
            drafts[:, k] = o
        return U, drafts, conf

    def stage_attention(self, a, prefix, ring, ang_all, bpos, site=None):
        """§2.12 stage attention for rounds p = 0..P-1 at once (rows of `a` are [P * B]): the queries of
        round p attend to the ring entries of positions max(0, p-W+1)..p and to all B block positions of
        round p (no causal mask inside the block). site: the block KV's teacher site (rows p * B + k)."""
        cfg = self.cfg
        P, B = bpos.shape
        nh, hd = cfg.n_heads, cfg.head_dim
        ang = ang_all[bpos.reshape(-1)]  # [P*B, rd/2]
        qr = self.norm(self.lin(a, prefix + "wq_a"), prefix + "q_norm")
        q = self.rot(self.lin(qr, prefix + "wq_b").view(P * B, nh, hd), ang[:, None, :]).view(P, B, nh, hd)
        kvb = self.win_qdq(self.rot(self.norm(self.lin(a, prefix + "wkv"), prefix + "kv_norm"), ang), site).view(P, B, hd)
        T = ring.shape[0]
        p = torch.arange(P)[:, None]
        j = torch.arange(T)[None, :]
        ring_mask = (j <= p) & (j > p - cfg.window)  # [P, T]
        lr = torch.einsum("pbhd,jd->pbhj", q, ring).masked_fill(~ring_mask[:, None, None, :], float("-inf"))
        lb = torch.einsum("pbhd,pcd->pbhc", q, kvb)
        sink = self.p(prefix + "attn_sink")
        logits = torch.cat([lr, lb, sink[None, None, :, None].expand(P, B, nh, 1)], dim=-1)
        logits[..., :-1] *= hd ** -0.5
        probs = torch.softmax(logits, dim=-1)
        o = torch.einsum("pbhj,jd->pbhd", probs[..., :T], ring) + torch.einsum("pbhc,pcd->pbhd", probs[..., T:T + B], kvb)
        o = self.rot(o.reshape(P * B, nh, hd), -ang[:, None, :])
        return self.out_proj(o, prefix)
