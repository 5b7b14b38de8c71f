"""Self-checks of the building blocks of reference/model_v4.py and model_common.py against the spec's
definitions, written as plain loops (model-v4.md §2.3, §2.4.1, §2.6, §2.7.2).

Run: /usr/bin/python3 -m unittest discover -s reference/tests -p 'test_parts.py'
"""
import math
import os
import sys
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import formats  # noqa: E402
import model_common  # noqa: E402
import model_v4  # noqa: E402
from model_v4 import Config, DeepseekV4Reference  # noqa: E402

TINY_LIKE = {
    "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 16,
    "qk_rope_head_dim": 8, "q_lora_rank": 16, "o_groups": 1, "o_lora_rank": 8, "sliding_window": 8,
    "compress_ratios": [4, 8, 0], "compress_rope_theta": 160000, "rope_theta": 10000,
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1},
    "index_n_heads": 2, "index_head_dim": 32, "index_topk": 3, "moe_intermediate_size": 8,
    "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2, "num_hash_layers": 1,
    "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-6, "num_nextn_predict_layers": 1,
}


class StubCheckpoint:
    """In-memory tensors for exercising single functions; not a checkpoint generator."""

    def __init__(self, tensors):
        self.t = tensors

    def weight(self, name):
        return self.t[name].astype(np.float64)

    def plain(self, name, rows=None):
        return self.t[name] if rows is None else self.t[name][rows]

    def is_quantized(self, name):
        return False

    def __contains__(self, name):
        return name in self.t


def stub_model(tensors, kv_qdq=True):
    m = object.__new__(DeepseekV4Reference)
    m.cfg = Config(TINY_LIKE)
    m.ckpt = StubCheckpoint(tensors)
    m.dtype = torch.float64
    m.kv_qdq = kv_qdq
    m.ref = False
    m.trace = None
    m._head = None
    m._hadamard = model_common.hadamard_matrix(m.cfg.index_dim)
    return m


class TestHadamard(unittest.TestCase):
    def test_orthonormal_sylvester_natural_order(self):
        for n in (1, 2, 8, 64, 128):
            h = model_common.hadamard_matrix(n)
            np.testing.assert_allclose((h @ h.T).numpy(), np.eye(n), atol=1e-12)
            s = np.array([[1.0]])
            while s.shape[0] < n:  # Sylvester recursion H_2k = [[H, H], [H, -H]]
                s = np.block([[s, s], [s, -s]])
            np.testing.assert_array_equal((h * math.sqrt(n)).numpy(), s)
        with self.assertRaises(ValueError):
            model_common.hadamard_matrix(12)


class TestSinkhorn(unittest.TestCase):
    def test_doubly_stochastic(self):
        g = torch.Generator().manual_seed(0)
        c = torch.randn(500, 4, 4, generator=g, dtype=torch.float64)
        out = model_common.sinkhorn(c, 20, 1e-6)
        self.assertTrue(bool((out > 0).all()))
        np.testing.assert_allclose(out.sum(-2).numpy(), 1.0, atol=1e-5)  # last step normalises columns
        np.testing.assert_allclose(out.sum(-1).numpy(), 1.0, atol=1e-3)
        # wider logits converge more slowly, but more iterations bring the rows closer to 1
        err = [(model_common.sinkhorn(c * 3, n, 1e-6).sum(-1) - 1).abs().max().item() for n in (5, 20, 80)]
        self.assertLess(err[1], err[0])
        self.assertLess(err[2], err[1])

    def test_iteration_structure(self):
        c = torch.randn(3, 4, 4, dtype=torch.float64)
        eps = 1e-6
        one = torch.softmax(c, -1) + eps  # 1 iteration: row softmax + eps, then one column normalisation
        one = one / (one.sum(-2, keepdim=True) + eps)
        torch.testing.assert_close(model_common.sinkhorn(c, 1, eps), one, rtol=0, atol=0)
        two = one / (one.sum(-1, keepdim=True) + eps)
        two = two / (two.sum(-2, keepdim=True) + eps)
        torch.testing.assert_close(model_common.sinkhorn(c, 2, eps), two, rtol=0, atol=0)


class TestRope(unittest.TestCase):
    def test_interleaved_pairs_and_inverse(self):
        x = torch.zeros(1, 8, dtype=torch.float64)
        x[0, 2] = 1.0  # real part of pair 1
        ang = torch.tensor([[0.0, 0.3, 0.0, 0.0]], dtype=torch.float64)
        y = model_common.rope(x, ang)
        np.testing.assert_allclose(y[0, 2:4].numpy(), [math.cos(0.3), math.sin(0.3)], atol=1e-15)
        z = torch.randn(5, 3, 8, dtype=torch.float64)
        a = torch.randn(5, 1, 4, dtype=torch.float64)
        torch.testing.assert_close(model_common.rope(model_common.rope(z, a), -a), z)
        t = model_common.rope_tail(torch.randn(2, 16, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64), 8)
        self.assertEqual(t.shape, (2, 16))

    def test_yarn_ramp_flash_numbers(self):
        cfg = Config(dict(TINY_LIKE, qk_rope_head_dim=64))
        plain = 1.0 / (160000.0 ** (np.arange(0, 64, 2) / 64))
        f = model_v4.rope_inv_freqs(cfg, 4).double().numpy()
        # spec §2.4.1: base 160000 gives low = 15, high = 25
        np.testing.assert_allclose(f[:16], plain[:16], rtol=1e-6)
        np.testing.assert_allclose(f[25:], plain[25:] / 16, rtol=1e-6)
        i = 20
        ramp = (i - 15) / 10
        np.testing.assert_allclose(f[i], plain[i] / 16 * ramp + plain[i] * (1 - ramp), rtol=1e-6)
        f0 = model_v4.rope_inv_freqs(cfg, 0).double().numpy()
        np.testing.assert_allclose(f0, 1.0 / (10000.0 ** (np.arange(0, 64, 2) / 64)), rtol=1e-6)


class TestSmallFunctions(unittest.TestCase):
    def test_topk_ties_lower_index(self):
        s = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
        self.assertEqual(model_common.topk_lower_index_on_ties(s, 2).tolist(), [[1, 2], [0, 1]])
        s = torch.tensor([[5.0] * 40])
        self.assertEqual(model_common.topk_lower_index_on_ties(s, 7).tolist(), [list(range(7))])

    def test_sqrt_softplus(self):
        x = torch.tensor([-50.0, -1.0, 0.0, 1.0, 30.0, 1000.0], dtype=torch.float64)
        want = [math.sqrt(math.log1p(math.exp(v))) if v < 500 else math.sqrt(v) for v in x.tolist()]
        np.testing.assert_allclose(model_common.sqrt_softplus(x).numpy(), want, rtol=1e-14)

    def test_hc_post_contracts_first_index(self):
        T, hc, d = 3, 4, 5
        f = torch.randn(T, d, dtype=torch.float64)
        X = torch.randn(T, hc, d, dtype=torch.float64)
        post = torch.randn(T, hc, dtype=torch.float64)
        comb = torch.randn(T, hc, hc, dtype=torch.float64)
        out = DeepseekV4Reference.hc_post(f, X, post, comb)
        for t in range(T):
            for k in range(hc):
                want = post[t, k] * f[t] + sum(comb[t, j, k] * X[t, j] for j in range(hc))
                torch.testing.assert_close(out[t, k], want)


def loop_compressor(a, wkv, wgate, ape, norm_w, ratio, width, cfg):
    """§2.6 written token by token, channel by channel."""
    T = a.shape[0]
    u = a @ wkv.T
    s = a @ wgate.T + ape[np.arange(T) % ratio]
    overlap = ratio == 4
    f = model_v4.rope_inv_freqs(cfg, ratio).double().numpy()
    out = []
    for g in range(T // ratio):
        z = np.zeros(width)
        for ch in range(width):
            vals, scores = [], []
            if overlap:
                for t in range(4 * g - 4, 4 * g):
                    if t >= 0:
                        vals.append(u[t, ch])
                        scores.append(s[t, ch])
                for t in range(4 * g, 4 * g + 4):
                    vals.append(u[t, width + ch])
                    scores.append(s[t, width + ch])
            else:
                for t in range(g * ratio, g * ratio + ratio):
                    vals.append(u[t, ch])
                    scores.append(s[t, ch])
            e = np.exp(np.array(scores) - max(scores))
            z[ch] = (e / e.sum() * np.array(vals)).sum()
        z = z / math.sqrt((z * z).mean() + cfg.norm_eps) * norm_w
        rd = cfg.rope_dim
        pos = g * ratio
        for i in range(rd // 2):
            c, sn = math.cos(pos * f[i]), math.sin(pos * f[i])
            re, im = z[width - rd + 2 * i], z[width - rd + 2 * i + 1]
            z[width - rd + 2 * i], z[width - rd + 2 * i + 1] = re * c - im * sn, re * sn + im * c
        out.append(z)
    return np.array(out).reshape(-1, width)


class TestCompressorAndIndexer(unittest.TestCase):
    def _tensors(self, prefix, ratio, width, rng):
        c = 2 if ratio == 4 else 1
        d = TINY_LIKE["hidden_size"]
        return {prefix + "wkv.weight": rng.normal(0, 0.3, (c * width, d)),
                prefix + "wgate.weight": rng.normal(0, 0.3, (c * width, d)),
                prefix + "ape": rng.normal(0, 1, (ratio, c * width)),
                prefix + "norm.weight": 1 + rng.normal(0, 0.1, width)}

    def test_compressor_matches_loops(self):
        rng = np.random.default_rng(5)
        for ratio, T in ((4, 19), (8, 26), (4, 3)):
            t = self._tensors("c.", ratio, 16, rng)
            m = stub_model(t)
            a = rng.normal(0, 1, (T, TINY_LIKE["hidden_size"]))
            got = m.compressor(torch.tensor(a), "c.", ratio, 16).numpy()
            want = loop_compressor(a, t["c.wkv.weight"], t["c.wgate.weight"], t["c.ape"], t["c.norm.weight"],
                                   ratio, 16, m.cfg)
            self.assertEqual(got.shape, (T // ratio, 16))
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)

    def test_indexer_selection(self):
        rng = np.random.default_rng(6)
        cfg = Config(TINY_LIKE)
        t = self._tensors("i.compressor.", 4, cfg.index_dim, rng)
        t["i.wq_b.weight"] = rng.normal(0, 0.3, (cfg.index_heads * cfg.index_dim, cfg.q_lora))
        t["i.weights_proj.weight"] = rng.normal(0, 0.3, (cfg.index_heads, cfg.dim))
        T = 30
        a = torch.tensor(rng.normal(0, 1, (T, cfg.dim)))
        qr = torch.tensor(rng.normal(0, 1, (T, cfg.q_lora)))
        for qdq in (True, False):
            m = stub_model(t, kv_qdq=qdq)
            m.trace = {}
            ang = m.angles(torch.arange(T), 4)
            sel = m.indexer(a, qr, "i.", ang, 0)
            score = m.trace["layer0.index_score"]
            for p in range(T):
                nvis = (p + 1) // 4
                k = min(cfg.index_topk, nvis)
                row = score[p, :nvis].tolist()
                want = sorted(range(nvis), key=lambda g: (-row[g], g))[:k]
                self.assertEqual(sorted(torch.nonzero(sel[p]).flatten().tolist()), sorted(want), p)


if __name__ == "__main__":
    unittest.main()



class TestTeacherForcing(unittest.TestCase):
    """_teach: a teacher's stored values replace ours only if each is a correct QDQ of our own value."""

    def setUp(self):
        self.m = stub_model({})
        rng = np.random.default_rng(5)
        self.x = torch.tensor(rng.normal(0, 1, (6, 128)))

    def teach(self, values):
        self.m.teacher = {"window0": values}
        self.m.teacher_stats = {}
        out = self.m._teach("window0", self.x, 64, formats.fp8_qdq)
        return out, self.m.teacher_stats["window0"]

    def test_own_values_pass_and_are_used(self):
        own = formats.fp8_qdq(self.x, 64)
        out, stats = self.teach(own.numpy())
        self.assertTrue(torch.equal(out, own))
        self.assertEqual(stats, (768, 0, 0, 0))

    def test_boundary_flip_is_accepted_and_used(self):
        # x exactly between two FP8 neighbours: either rounding is as near; a teacher may hold the other.
        scale = 2.0 ** math.ceil(math.log2(float(self.x[0, :64].abs().max()) / 448))
        self.x[0, 5] = 1.0625 * scale  # midpoint of 1.0 and 1.125 (E4M3 step 1/8 in [1, 2))
        own = formats.fp8_qdq(self.x, 64)
        other = own.clone()
        other[0, 5] = (1.125 if float(own[0, 5]) == scale else 1.0) * scale
        out, (_, differ, bad, off) = self.teach(other.numpy())
        self.assertEqual((differ, bad, off), (1, 0, 0))
        self.assertEqual(float(out[0, 5]), float(other[0, 5]))

    def test_wrong_rounding_and_off_grid_values_are_counted(self):
        own = formats.fp8_qdq(self.x, 64)
        wrong = own.clone()
        wrong[1, 3] = own[1, 3] * 1.25  # at least one FP8 step from the nearest value
        wrong[2, 7] = own[2, 7] * (1 + 2 ** -10)  # not representable: off the grid (and not nearest)
        _, (_, differ, bad, off) = self.teach(wrong.numpy())
        self.assertEqual((differ, bad), (2, 2))
        self.assertGreaterEqual(off, 1)
