"""Self-checks of reference/model_v41.py and engram_v41.py against model-v41.md: the Appendix A known
answers (primes, multipliers, hash row ids of the released layer 1 and 14), the compressed-KV FP4 QDQ
with E4M3 scales (§2.10), the candidate blocks (§2.8) and the top-k selection against per-query loops,
the teacher-forcing check (it accepts a correct QDQ and refuses wrong ones) and the §5 normaliser.

Run: /usr/bin/python3 -m unittest discover -s reference/tests -p 'test_v41_parts.py'
"""
import os
import sys
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import engram_v41  # noqa: E402
import formats  # noqa: E402
import model_v41  # noqa: E402


class EngramKnownAnswers(unittest.TestCase):
    """Appendix A: released constants (engram_vocab_size 16 000 000, N 4, H 8, compressed vocab 99 092)."""

    def test_primes(self):
        p = engram_v41.bucket_primes(16000000, 2, 4, 8)
        self.assertEqual(p[0][:8], [16000057, 16000079, 16000081, 16000097, 16000121, 16000129, 16000133, 16000183])
        self.assertEqual((p[0][-1], p[1][0], p[1][-1]), (16000463, 16000477, 16000889))
        self.assertEqual((sum(p[0]), sum(p[1])), (384006168, 384016682))
        self.assertEqual(engram_v41.offsets(p[0])[:3], [0, 16000057, 32000136])

    def test_multipliers(self):
        self.assertEqual(engram_v41.multipliers(1, 99092, 4),
                         [76632096046245, 4839876093313, 35959672319349, 73987337458391])
        self.assertEqual(engram_v41.multipliers(14, 99092, 4),
                         [67716810739261, 51510806800915, 30921347202721, 82619226485591])

    def test_hash_rows(self):
        p = engram_v41.bucket_primes(16000000, 2, 4, 8)
        rows1 = engram_v41.hash_ids([5, 17, 42, 99], 2, engram_v41.multipliers(1, 99092, 4), p[0], 8)
        self.assertEqual(rows1[0].tolist(), [
            5412672, 18319159, 35492627, 60880252, 74962984, 95657733, 98005115, 127351390, 143494632, 151789366,
            171410756, 185435171, 207165545, 218031260, 226330336, 247008214, 256353435, 276423911, 295874085,
            305599364, 322749888, 348475788, 367405771, 372009279])
        self.assertEqual(rows1[3].tolist(), [
            8220142, 24076129, 42973604, 50161011, 68969938, 80580362, 102387095, 127047346, 134315424, 158777482,
            171327062, 191148003, 202516735, 208212681, 232771379, 244773367, 262123890, 274880322, 301400668,
            314663841, 334174001, 347440506, 356839451, 370926383])
        rows14 = engram_v41.hash_ids([5, 17, 42, 99], 2, engram_v41.multipliers(14, 99092, 4), p[1], 8)
        self.assertEqual(rows14[3].tolist(), [
            11523440, 21938014, 44040595, 58778561, 66148416, 92452634, 110886980, 120121793, 129203345, 149058177,
            163318915, 187032138, 198030182, 216753334, 226652212, 245960357, 262291490, 274029592, 302724075,
            317309773, 328133233, 351701537, 367235299, 380902823])


class CompressedKvQdq(unittest.TestCase):
    def test_scale_is_the_nearest_e4m3_of_amax_over_6(self):
        torch.manual_seed(0)
        x = torch.randn(64, 32, dtype=torch.float64) * torch.rand(64, 1, dtype=torch.float64) * 10
        y = model_v41.fp4_qdq_e4m3_scale(x, 16)
        grid = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
        for r in range(64):
            for b in range(2):
                blk = x[r, 16 * b:16 * b + 16]
                amax = np.float32(max(float(blk.abs().max()), 6 * 2.0 ** -9))
                q = np.float32(amax / np.float32(6))
                # nearest E4M3 by brute force over all finite positive codes (ties: even mantissa)
                codes = [(formats.e4m3_value(c), c) for c in range(1, 0x7F)]
                best = min(codes, key=lambda vc: (abs(vc[0] - float(q)), vc[1] & 1))[0]
                for j in range(16):
                    v = float(blk[j]) / best
                    v = max(-6.0, min(6.0, v))
                    cands = sorted(grid + [-g for g in grid], key=lambda g: (abs(g - v), grid.index(abs(g)) & 1))
                    self.assertEqual(float(y[r, 16 * b + j]), cands[0] * best, (r, b, j))


class CandidatesAndSelection(unittest.TestCase):
    class Cfg:
        cand_block = 2
        cand_blocks = 2
        index_topk = 3

    def _model(self):
        m = model_v41.DeepseekV41Reference.__new__(model_v41.DeepseekV41Reference)
        m.cfg = self.Cfg()
        return m

    def test_candidate_mask_against_a_loop(self):
        torch.manual_seed(1)
        T, G = 9, 9  # ratio 1: n_p = p + 1
        score = torch.randn(T, G, dtype=torch.float64)
        visible = torch.arange(G)[None, :] < (torch.arange(T) + 1)[:, None]
        score = score.masked_fill(~visible, float("-inf"))
        mask = self._model().candidate_mask(score, visible)
        B, K = 2, 2
        for p in range(T):
            n = p + 1
            nb = (n + B - 1) // B
            bs = [max(float(score[p, g]) for g in range(b * B, min(n, b * B + B))) for b in range(nb)]
            bs[(n - 1) // B] = float("inf")
            kept = sorted(range(nb), key=lambda b: (-bs[b], b))[:K]
            want = [g < n and (g // B) in kept for g in range(G)]
            self.assertEqual(mask[p].tolist(), want, p)

    def test_selection_uses_only_finite_scores(self):
        score = torch.tensor([[3.0, float("-inf"), 1.0, 2.0, float("-inf")]], dtype=torch.float64)
        visible = torch.tensor([[True, True, True, True, False]])
        sel = self._model().select(score, visible)
        self.assertEqual(sel[0].tolist(), [True, False, True, True, False])


class TeacherForcing(unittest.TestCase):
    """The golden teacher test's check (_teach): stored values from a correct QDQ pass, values from a wrong
    QDQ (truncation instead of round-to-nearest-even, FP4 block 16 instead of 32, a power-of-two scale
    instead of the E4M3 one, an E5M2 grid instead of E4M3) are reported as wrong or off the grid."""

    def _model(self, teacher):
        m = model_v41.DeepseekV41Reference.__new__(model_v41.DeepseekV41Reference)
        m.kv_qdq = True
        m.dtype = torch.float64
        m.teacher = teacher
        m.teacher_stats = {}
        return m

    def _stats(self, site, x, stored):
        m = self._model({site: stored})
        fn = {"window": m.win_qdq, "comp": m.ckv_qdq, "key": m.idx_qdq}[site.rstrip("0123456789")]
        self.assertTrue(torch.equal(fn(x, site), stored.to(x.dtype)))
        return m.teacher_stats[site]  # (values, differ, wrong, off grid)

    def setUp(self):
        torch.manual_seed(3)
        self.x = torch.randn(40, 64, dtype=torch.float64) * torch.rand(40, 1, dtype=torch.float64) * 4

    def test_correct_values_pass(self):
        x = self.x
        for site, own in (("window3", formats.fp8_qdq(x, 32)), ("comp2", model_v41.fp4_qdq_e4m3_scale(x, 16)),
                          ("key2", formats.fp4_qdq(x, 32))):
            n, differ, wrong, off = self._stats(site, x, own.clone())
            self.assertEqual((n, differ, wrong, off), (x.numel(), 0, 0, 0), site)

    def test_wrong_qdq_is_refused(self):
        x = self.x
        real_round = torch.round
        torch.round = torch.trunc  # formats.round_minifloat rounds with torch.round
        try:
            truncated = formats.fp8_qdq(x, 32)
        finally:
            torch.round = real_round
        self.assertGreater(self._stats("window0", x, truncated)[2], 0)
        self.assertGreater(sum(self._stats("key1", x, formats.fp4_qdq(x, 16))[2:]), 0)
        self.assertGreater(sum(self._stats("comp1", x, formats.fp4_qdq(x, 16))[2:]), 0)
        e5m2 = formats._blockwise_qdq(x, 32, 448.0, 1e-4, lambda v: formats.round_minifloat(v, 2, -14))
        self.assertGreater(sum(self._stats("window0", x, e5m2)[2:]), 0)

    def test_missing_or_misshapen_values_are_errors(self):
        m = self._model({})
        with self.assertRaises(KeyError):
            m.win_qdq(self.x, "window0")
        m = self._model({"window0": self.x[:3]})
        with self.assertRaises(ValueError):
            m.win_qdq(self.x, "window0")


class EngramNormalize(unittest.TestCase):
    """§5's known answers (npm tokenizers 0.23.2) and where HF is more precise than the spec's wording."""

    def test_known_answers(self):
        n = engram_v41.normalize
        for s in (" The", "the", "THE"):
            self.assertEqual(n(s), "the")
        self.assertEqual((n(" "), n("  x\t\ny "), n("Café"), n("ﬁ"), n("<｜User｜>")), (" ", "x y", "cafe", "fi", "<|user|>"))
        self.assertEqual((n("\u093e"), n("ΟΔΟΣ"), n("İ"), n("\ue000")), ("", "οδοσ", "i", " "))


if __name__ == "__main__":
    unittest.main()
