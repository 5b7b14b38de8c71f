"""Self-checks of the 'reference' numerics of reference/model_v41.py (the official V4.1 code's activation
rounding, NOTES.md "V4.1 reference numerics"): an FP8/FP4 weight's input is FP8 E4M3 QDQ'd in blocks of 32
with power-of-two scales (checked against a brute-force E4M3 search and a frexp scale, not formats.py's
rounding), the product stored bf16 (checked against bit arithmetic); BF16 weights take no QDQ; plain
numerics round nothing; the bf16 attention core stays within bf16 rounding of the official kernel's
blockwise online softmax.

Run: /usr/bin/python3 -m unittest discover -s reference/tests -p 'test_v41_numerics.py'
"""
import math
import os
import sys
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import formats  # noqa: E402
import model_v41  # noqa: E402
from model_common import rms_norm, rope_tail  # noqa: E402

E4M3 = sorted({formats.e4m3_value(c) for c in range(0x7F)} | {-formats.e4m3_value(c) for c in range(0x7F)})


def e4m3_nearest_even(v):
    """The E4M3 value nearest v by brute force over every finite code; ties to the even code."""
    best = min(range(0x7F), key=lambda c: (abs(formats.e4m3_value(c) - abs(v)), c & 1))
    return math.copysign(formats.e4m3_value(best), v)


def fp8_qdq_by_hand(x, block):
    """Per block of `block` values: s = 2^ceil(log2(fp32(max(amax, 1e-4)) * fp32(1/448))), values clamped to
    +-448 after division and rounded to the nearest E4M3 value."""
    out = np.empty_like(x)
    for r in range(x.shape[0]):
        for b in range(0, x.shape[1], block):
            blk = x[r, b:b + block]
            prod = np.float32(max(np.float32(np.abs(blk).max()), np.float32(1e-4))) * np.float32(1 / 448)
            m, e = math.frexp(float(prod))  # prod = m * 2^e, m in [0.5, 1)
            s = 2.0 ** (e - 1 if m == 0.5 else e)
            out[r, b:b + block] = [e4m3_nearest_even(max(-448.0, min(448.0, v / s))) * s for v in blk]
    return out


def bf16_by_bits(x64):
    """float64 -> float32 -> bfloat16 (round to nearest even on the bits) -> float64."""
    bits = np.asarray(x64, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return bits.view(np.float32).astype(np.float64)


class StubCheckpoint:
    def __init__(self, weights, quantized):
        self.weights, self.quantized = weights, quantized

    def weight(self, name):
        return self.weights[name]

    def plain(self, name):
        return self.weights[name]

    def is_quantized(self, name):
        return name in self.quantized


def bare_model(numerics, ckpt):
    m = model_v41.DeepseekV41Reference.__new__(model_v41.DeepseekV41Reference)
    m.ref = numerics == "reference"
    m._quantized_sites = set()
    m.dtype = torch.float64
    m.ckpt = ckpt
    m.trace = None

    class Cfg:
        act_block = 32
        norm_eps = 1e-20
        rope_dim = 8
    m.cfg = Cfg
    return m


class ReferenceNumerics(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(7)
        # 64 inputs: the second block of 32 a thousand times larger, so a block of 64 would scale the first
        # 32 by the second's amax and flush most of them to zero.
        self.x = rng.standard_normal((6, 64)) * np.where(np.arange(64) < 32, 0.01, 10.0)
        self.x[5, :32] = 0.0  # an all-zero block: amax floor
        w = rng.standard_normal((24, 64)) * np.where(np.arange(64) < 32, 100.0, 0.1)  # both blocks count
        self.ckpt = StubCheckpoint({"fp8.weight": w, "bf16.weight": w.copy(), "n.weight": rng.random(64) + 0.5},
                                   {"fp8.weight"})
        self.w = w

    def test_fp8_weight_input_is_quantized_in_blocks_of_32_and_the_output_stored_bf16(self):
        m = bare_model("reference", self.ckpt)
        y = m.lin(torch.from_numpy(self.x), "fp8")
        xq = torch.from_numpy(fp8_qdq_by_hand(self.x, 32))
        want = bf16_by_bits((xq @ torch.from_numpy(self.w).T).numpy())
        self.assertTrue(np.array_equal(y.numpy(), want))
        self.assertEqual(m._quantized_sites, {"fp8"})
        # The blocks matter: one block over the 64 inputs gives another result.
        wrong = bf16_by_bits((formats.fp8_qdq(torch.from_numpy(self.x), 64) @ torch.from_numpy(self.w).T).numpy())
        self.assertFalse(np.array_equal(y.numpy(), wrong))

    def test_bf16_weight_takes_no_activation_quantization(self):
        m = bare_model("reference", self.ckpt)
        x = torch.from_numpy(self.x)
        exact = (x @ torch.from_numpy(self.w).T).numpy()
        self.assertTrue(np.array_equal(m.lin(x, "bf16").numpy(), bf16_by_bits(exact)))
        self.assertTrue(np.array_equal(m.lin(x, "bf16", out_bf16=False).numpy(), exact))  # the fp32 GEMMs
        self.assertEqual(m._quantized_sites, set())

    def test_norm_and_rope_are_stored_bf16(self):
        m = bare_model("reference", self.ckpt)
        x = torch.from_numpy(self.x)
        n = rms_norm(x, torch.from_numpy(self.ckpt.weights["n.weight"]), 1e-20).numpy()
        self.assertTrue(np.array_equal(m.norm(x, "n").numpy(), bf16_by_bits(n)))
        ang = torch.linspace(0.1, 2.0, 6, dtype=torch.float64)[:, None] * torch.ones(1, 4, dtype=torch.float64)
        self.assertTrue(np.array_equal(m.rot(x, ang).numpy(), bf16_by_bits(rope_tail(x, ang, 8).numpy())))

    def test_plain_numerics_round_nothing(self):
        m = bare_model("plain", self.ckpt)
        x = torch.from_numpy(self.x)
        self.assertIs(m.bf(x), x)
        for name in ("fp8", "bf16"):
            self.assertTrue(torch.equal(m.lin(x, name), x @ m.w(name + ".weight").T))
        self.assertTrue(torch.equal(m.norm(x, "n"), rms_norm(x, m.p("n.weight"), 1e-20)))
        self.assertEqual(m._quantized_sites, set())


def official_blockwise_attention(logits, keys, sink, block=64):
    """The official sparse_attn kernel's algorithm for one query and head, written from its description:
    the attended entries in index order, blocks of `block`, a running max (floor -1e30), probabilities
    exp(s - running max) rounded to bf16 before the product with the values, the unrounded ones summed
    into the denominator, earlier blocks rescaled by exp(old max - new max), exp(sink - max) added last,
    the output rounded to bf16."""
    idx = torch.nonzero(torch.isfinite(logits)).flatten()
    m, den = torch.tensor(-1e30, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)
    acc = torch.zeros(keys.shape[1], dtype=torch.float64)
    for b in range(0, idx.numel(), block):
        j = idx[b:b + block]
        s = logits[j]
        new = torch.maximum(m, s.max())
        p = torch.exp(s - new)
        scale = torch.exp(m - new)
        den = den * scale + p.sum()
        acc = acc * scale + formats.round_bf16(p) @ keys[j]
        m = new
    den = den + torch.exp(sink - m)
    return formats.round_bf16(acc / den)


class ReferenceAttentionCore(unittest.TestCase):
    def test_within_bf16_rounding_of_the_blockwise_kernel(self):
        torch.manual_seed(11)
        T, nh, J, d = 5, 3, 200, 16
        logits = torch.randn(T, nh, J, dtype=torch.float64) * 3
        mask = torch.rand(T, J) < 0.8  # gaps in the index list shift entries across block boundaries
        mask[:, 0] = True
        logits = logits.masked_fill(~mask[:, None, :], float("-inf"))
        keys = formats.round_bf16(torch.randn(J, d, dtype=torch.float64))
        sink = torch.randn(nh, dtype=torch.float64) + 8  # as large as the largest logits: the sink counts
        m = bare_model("reference", None)
        o = m.sparse_attn_bf16(logits, keys, sink)
        self.assertTrue(torch.equal(o, formats.round_bf16(o)))
        plain = torch.softmax(torch.cat([logits, sink[None, :, None].expand(T, nh, 1)], dim=-1), dim=-1)[..., :-1]
        plain = torch.einsum("thj,jd->thd", plain, keys)
        for t in range(T):
            for h in range(nh):
                want = official_blockwise_attention(logits[t, h], keys, sink[h])
                ulp = 2.0 ** -7 * float(want.abs().max())  # one bf16 step at the row's largest value
                self.assertLessEqual(float((o[t, h] - want).abs().max()), 2 * ulp, (t, h))
                self.assertLessEqual(float((o[t, h] - plain[t, h]).abs().max()), 2 * ulp, (t, h))
        self.assertFalse(torch.equal(o, plain))  # it does round


if __name__ == "__main__":
    unittest.main()
