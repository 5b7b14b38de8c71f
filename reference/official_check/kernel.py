"""CPU stand-ins for the six kernels the official `inference/model.py` imports from its tilelang
`kernel.py`, written from their documented semantics (model-v4.md §2.9, §2.10, §2.3.1), for
run_official.py only. Only what bf16-weight mode uses is provided: the in-place QDQs, the sparse
attention with sink and the mHC split + Sinkhorn; the FP8/FP4 GEMMs are never called there."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import formats  # noqa: E402

QDQ = True  # run_official.py --no-qdq turns the KV / indexer QDQ off


def act_quant(x, block_size=128, scale_fmt=None, scale_dtype=torch.float32, inplace=False):
    if not inplace:
        raise NotImplementedError("activation quantization for FP8 GEMMs is not used in bf16-weight mode")
    if QDQ:
        x.copy_(formats.fp8_qdq(x, block_size))
    return x


def fp4_act_quant(x, block_size=32, inplace=False):
    if not inplace:
        raise NotImplementedError("FP4 activation quantization is only used in place")
    if QDQ:
        x.copy_(formats.fp4_qdq(x, block_size))
    return x


def fp8_gemm(*args, **kwargs):
    raise NotImplementedError("not used in bf16-weight mode")


def fp4_gemm(*args, **kwargs):
    raise NotImplementedError("not used in bf16-weight mode")


def sparse_attn(q, kv, attn_sink, topk_idxs, softmax_scale):
    """q [b, s, h, d], kv [b, n, d], topk_idxs [b, s, k] (-1 = skip): sink-softmax attention."""
    b = q.shape[0]
    idx = topk_idxs.long()
    gathered = kv[torch.arange(b)[:, None, None], idx.clamp(min=0)]  # [b, s, k, d]
    scores = torch.einsum("bshd,bskd->bshk", q, gathered) * softmax_scale
    scores = scores.masked_fill((idx < 0)[:, :, None, :], float("-inf"))
    m = torch.maximum(scores.amax(-1), attn_sink[None, None, :])
    e = torch.exp(scores - m[..., None])
    den = e.sum(-1) + torch.exp(attn_sink[None, None, :] - m)
    return torch.einsum("bshk,bskd->bshd", e, gathered) / den[..., None]


def hc_split_sinkhorn(mixes, hc_scale, hc_base, hc_mult=4, sinkhorn_iters=20, eps=1e-6):
    hc = hc_mult
    pre = torch.sigmoid(mixes[..., :hc] * hc_scale[0] + hc_base[:hc]) + eps
    post = 2 * torch.sigmoid(mixes[..., hc:2 * hc] * hc_scale[1] + hc_base[hc:2 * hc])
    comb = (mixes[..., 2 * hc:] * hc_scale[2] + hc_base[2 * hc:]).unflatten(-1, (hc, hc))
    comb = comb.softmax(-1) + eps
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(sinkhorn_iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    return pre, post, comb
