"""The pieces the V4 and V4.1 references (model_v4.py, model_v41.py) share: model-v41.md says they are
unchanged from V4 (mHC §2.3, RoPE §2.4.1, the MoE router's scoring and expert sum §2.11). Section
numbers are model-v4.md's. Each model's own code (its config, its RoPE table's YaRN ramp, its QDQ
steps, attention, block wiring) stays in its file; this module holds what is the same to the operation,
so that both references compute it identically.
"""
import math

import numpy as np
import torch


# ---------------------------------------------------------------------------------------------
# config.json


def field_reader(d):
    """need(k): d[k], or a ValueError naming the missing config.json field."""
    def need(k):
        if k not in d:
            raise ValueError(f"config.json: missing field {k}")
        return d[k]
    return need


def read_shared_fields(cfg, d):
    """Sets on cfg the fields both configs read the same way (§1.1): shapes, attention, RoPE and YaRN,
    indexer, MoE router, mHC."""
    need = field_reader(d)
    cfg.vocab = need("vocab_size")
    cfg.dim = need("hidden_size")
    cfg.n_layers = need("num_hidden_layers")
    cfg.n_heads = need("num_attention_heads")
    cfg.head_dim = need("head_dim")
    cfg.rope_dim = need("qk_rope_head_dim")
    cfg.q_lora = need("q_lora_rank")
    cfg.o_groups = need("o_groups")
    cfg.o_lora = need("o_lora_rank")
    cfg.window = need("sliding_window")
    cfg.ratios = list(need("compress_ratios"))
    cfg.compress_rope_theta = float(need("compress_rope_theta"))
    cfg.rope_theta = float(need("rope_theta"))
    rs = d.get("rope_scaling") or {}
    cfg.rope_factor = float(rs.get("factor", 1.0))
    cfg.original_seq_len = int(rs.get("original_max_position_embeddings", 0))
    cfg.beta_fast = float(rs.get("beta_fast", 32))
    cfg.beta_slow = float(rs.get("beta_slow", 1))
    cfg.index_heads = need("index_n_heads")
    cfg.index_dim = need("index_head_dim")
    cfg.index_topk = need("index_topk")
    cfg.moe_inter = need("moe_intermediate_size")
    cfg.n_experts = need("n_routed_experts")
    cfg.topk = need("num_experts_per_tok")
    cfg.route_scale = float(d.get("routed_scaling_factor", 1.0))
    cfg.swiglu_limit = float(d.get("swiglu_limit", 0.0))
    cfg.hc = need("hc_mult")
    cfg.sinkhorn_iters = need("hc_sinkhorn_iters")
    cfg.hc_eps = float(need("hc_eps"))


# ---------------------------------------------------------------------------------------------
# Small building blocks


def rms_norm(x, weight, eps):
    y = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    return y * weight if weight is not None else y


def hadamard_matrix(n, dtype=torch.float64):
    """Orthonormal Sylvester Walsh-Hadamard matrix in natural order: H[i][j] = (-1)^popcount(i&j)/sqrt(n)."""
    if n & (n - 1):
        raise ValueError(f"Hadamard size {n} is not a power of two")
    i = torch.arange(n)
    bits = i[:, None] & i[None, :]
    parity = torch.zeros(n, n, dtype=torch.int64)
    while bool(bits.any()):
        parity ^= bits & 1
        bits = bits >> 1
    return (1.0 - 2.0 * parity.to(dtype)) / math.sqrt(n)


def sinkhorn(c, iters, eps):
    """§2.3.1 step 5: row softmax (+eps), column normalisation, then iters-1 x (row, column)."""
    c = torch.softmax(c, dim=-1) + eps
    c = c / (c.sum(dim=-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        c = c / (c.sum(dim=-1, keepdim=True) + eps)
        c = c / (c.sum(dim=-2, keepdim=True) + eps)
    return c


def rope_base_freqs(cfg, ratio):
    """(f, base): the inverse frequencies f_i = base^(-2i/rd) (i < rd/2) of one layer in fp32, as the
    official table is computed (§2.4.1): base rope_theta for ratio 0, compress_rope_theta otherwise.
    YaRN (compressed layers) is applied on top by each model's rope_inv_freqs."""
    rd = cfg.rope_dim
    base = cfg.compress_rope_theta if ratio else cfg.rope_theta
    return 1.0 / (base ** (torch.arange(0, rd, 2, dtype=torch.float32) / rd)), base


def yarn_bounds(cfg, base):
    """The YaRN ramp's (low, high) dimension bounds from beta_fast and beta_slow (§2.4.1)."""
    rd = cfg.rope_dim

    def corr(rot):
        return rd * math.log(cfg.original_seq_len / (rot * 2 * math.pi)) / (2 * math.log(base))
    return max(math.floor(corr(cfg.beta_fast)), 0), min(math.ceil(corr(cfg.beta_slow)), rd - 1)


def rope(x, angles):
    """Interleaved RoPE on the last dim of x: pairs (2i, 2i+1) rotated by angles[..., i].
    `angles` broadcasts against x[..., 0::2]."""
    xr, xi = x[..., 0::2], x[..., 1::2]
    c, s = torch.cos(angles), torch.sin(angles)
    return torch.stack([xr * c - xi * s, xr * s + xi * c], dim=-1).flatten(-2)


def rope_tail(x, angles, rd):
    """RoPE on the last rd elements of x only."""
    return torch.cat([x[..., :-rd], rope(x[..., -rd:], angles)], dim=-1)


def sqrt_softplus(x):
    return torch.sqrt(torch.clamp(x, min=0) + torch.log1p(torch.exp(-x.abs())))


def topk_lower_index_on_ties(scores, k):
    """Indices of the k largest values per row; exact ties go to the lower index."""
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices
    return order[..., :k]


# ---------------------------------------------------------------------------------------------


class ReferenceCommon:
    """Methods of both reference models. The subclass sets cfg (with the read_shared_fields fields and
    norm_eps), ckpt (a safetensors_io.Checkpoint), dtype, trace (a dict, or None), teacher (a dict or
    None), teacher_stats (a dict) and _head (None), and defines swiglu(x, prefix, weight=None)."""

    # --- weights -----------------------------------------------------------------------------------

    def w(self, name):
        return torch.from_numpy(self.ckpt.weight(name)).to(self.dtype)

    def p(self, name):
        """A small non-GEMM parameter (norm weights, hc_*, ape, sink, bias) as a tensor."""
        return torch.from_numpy(self.ckpt.plain(name).astype(np.float64)).to(self.dtype)

    def embed(self, ids):
        rows = self.ckpt.plain("embed.weight", rows=ids.numpy())
        return torch.from_numpy(rows.astype(np.float64)).to(self.dtype)

    def head(self):
        if self._head is None:
            self._head = self.w("head.weight")
        return self._head

    def _check_ids(self, ids):
        ids = torch.as_tensor(ids, dtype=torch.int64)
        if ids.ndim != 1 or ids.numel() == 0:
            raise ValueError("prompt ids must be a non-empty 1-D list")
        bad = (ids < 0) | (ids >= self.cfg.vocab)
        if bool(bad.any()):
            p = int(torch.where(bad)[0][0])
            raise ValueError(f"prompt id {int(ids[p])} at position {p} is outside [0, {self.cfg.vocab})")
        return ids

    def _record(self, key, value):
        if self.trace is not None:
            self.trace[key] = value.detach().clone() if torch.is_tensor(value) else value

    # --- teacher forcing ---------------------------------------------------------------------------

    def _teacher_or_own(self, site, x, own, block, off_grid, trim_to_x=False):
        """`own` (this reference's QDQ of x), or with a teacher the teacher's values for `site`. Those
        must be what a correct QDQ of x gives: each value equal to ours, or, where x lies within a hair
        of a rounding decision (so that a 1e-7 difference upstream may flip it), as far from x as ours
        to within 1e-5 of the block's amax; and on the grid (off_grid(d): where d is not). A wrong QDQ in
        either engine breaks that (see NOTES.md "Teacher forcing"). trim_to_x: the teacher's vectors may
        be longer (unquantized trailing dims) and are cut to x's. teacher_stats[site] = (values,
        differing from ours, not a nearest rounding, off grid)."""
        teacher = getattr(self, "teacher", None)  # the unit tests build bare instances without __init__
        if teacher is None or site is None:
            return own
        if site not in teacher:
            raise KeyError(f"teacher forcing: no values for {site}")
        d = torch.as_tensor(teacher[site]).to(self.dtype)
        if trim_to_x:
            d = d[..., :x.shape[-1]]
        if d.shape != x.shape:
            raise ValueError(f"teacher forcing: {site} has shape {tuple(d.shape)}, expected {tuple(x.shape)}")
        amax = x.reshape(*x.shape[:-1], -1, block).abs().amax(-1, keepdim=True)
        tol = (1e-5 * amax).expand(*x.shape[:-1], x.shape[-1] // block, block).reshape(x.shape)
        differ = d != own
        bad = differ & (((d - x).abs() - (own - x).abs()).abs() > tol)
        self.teacher_stats[site] = (d.numel(), int(differ.sum()), int(bad.sum()), int(off_grid(d).sum()))
        return d

    # --- mHC (§2.3) ----------------------------------------------------------------------------------

    def hc_logits(self, X, fn):
        """The mixing logits of the streams X [T, hc, d] under the parameter `fn`: the flattened streams
        times fn^T, scaled by their reciprocal RMS."""
        T, hc, d = X.shape
        v = X.reshape(T, hc * d)
        rho = torch.rsqrt(v.square().mean(-1, keepdim=True) + self.cfg.norm_eps)
        return (v @ self.p(fn).T) * rho

    def hc_mix(self, X, prefix):
        cfg = self.cfg
        T, hc, d = X.shape
        m = self.hc_logits(X, prefix + "_fn")
        s, b = self.p(prefix + "_scale"), self.p(prefix + "_base")
        pre = torch.sigmoid(m[:, :hc] * s[0] + b[:hc]) + cfg.hc_eps
        post = 2 * torch.sigmoid(m[:, hc:2 * hc] * s[1] + b[hc:2 * hc])
        comb = sinkhorn((m[:, 2 * hc:] * s[2] + b[2 * hc:]).view(T, hc, hc), cfg.sinkhorn_iters, cfg.hc_eps)
        return pre, post, comb

    @staticmethod
    def hc_pre(X, pre):
        return torch.einsum("tj,tjd->td", pre, X)

    @staticmethod
    def hc_post(f, X, post, comb):
        # X'[k] = post[k] f + sum_j comb[j][k] X[j]: contraction over the FIRST index of comb.
        return post[:, :, None] * f[:, None, :] + torch.einsum("tjk,tjd->tkd", comb, X)

    # --- MoE (§2.11) -----------------------------------------------------------------------------------

    def experts(self, x, sel, weights, prefix):
        """The routed experts sel[t] of each row, weighted by weights[t] (weights inside, before w2), plus
        the shared expert."""
        y = torch.zeros(x.shape[0], self.cfg.dim, dtype=self.dtype)
        for e in torch.unique(sel).tolist():
            rows, slot = torch.where(sel == e)
            y.index_add_(0, rows, self.swiglu(x[rows], f"{prefix}experts.{e}.", weights[rows, slot][:, None]))
        return y + self.swiglu(x, prefix + "shared_experts.")
