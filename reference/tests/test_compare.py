"""Self-checks of reference/compare.py: its statistics on matrices whose answers are known by hand, and the
same bits whatever block of rows it converts to float64 at a time.

Run: /usr/bin/python3 -m unittest discover -s reference/tests -p 'test_compare.py'
"""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import compare  # noqa: E402


def stats_bits(s):
    """Every field of compare()'s result in a form that compares bit for bit (NaN equal to NaN)."""
    return {k: (v.dtype.str, v.tobytes()) if isinstance(v, np.ndarray) else repr(v) for k, v in s.items()}


class CompareTest(unittest.TestCase):
    def setUp(self):
        self.saved = compare.ROW_BLOCK

    def tearDown(self):
        compare.ROW_BLOCK = self.saved

    def test_known_values(self):
        # Rows of b have norm 5 (3, 4); a's rows are off by (0, 0), (0, 0.5), (-1, 0): rel 0, 0.1, 0.2.
        b = np.array([[3, 4, 0], [3, 4, 0], [3, 4, 0]], dtype=np.float32)
        a = b + np.array([[0, 0, 0], [0, 0.5, 0], [-1, 0, 0]], dtype=np.float32)
        s = compare.compare(a, b)
        self.assertEqual(s["rows"], 3)
        np.testing.assert_allclose(s["rel"], [0.0, 0.1, 0.2], rtol=1e-12)
        self.assertAlmostEqual(s["median_rel"], 0.1, places=12)
        self.assertAlmostEqual(s["max_rel"], 0.2, places=12)
        self.assertEqual(s["worst_row"], 2)
        self.assertEqual(s["argmax_agree"], 1.0)
        self.assertEqual(s["flips"], [])
        self.assertTrue(s["finite"])

    def test_flip_and_non_finite(self):
        b = np.array([[1, 2, 0], [5, 1, 0], [0, 0, 1]], dtype=np.float32)
        a = np.array([[1, 2, 0], [1, 3, 0], [0, 0, 1]], dtype=np.float32)
        s = compare.compare(a, b)
        self.assertAlmostEqual(s["argmax_agree"], 2 / 3, places=12)
        self.assertEqual(len(s["flips"]), 1)
        f = s["flips"][0]
        self.assertEqual((f["pos"], f["argmax_a"], f["argmax_b"]), (1, 1, 0))
        self.assertEqual((f["margin_a"], f["margin_b"], f["a_gap"], f["b_gap"]), (2.0, 4.0, 2.0, 4.0))
        a[2, 1] = np.inf
        self.assertFalse(compare.compare(a, b)["finite"])

    def test_blocks_of_rows_give_the_same_bits(self):
        rng = np.random.default_rng(5)
        b = rng.standard_normal((53, 300)).astype(np.float32)
        a = b + (0.3 * rng.standard_normal(b.shape)).astype(np.float32)  # flips in many rows
        a[40, 7] = np.nan
        whole = None
        for block in (10 ** 9, 1, 7, 16, 52, 53):
            compare.ROW_BLOCK = block
            s = stats_bits(compare.compare(a, b))
            if whole is None:
                whole = s
                self.assertGreater(len(compare.compare(a, b)["flips"]), 5)
            else:
                self.assertEqual(s, whole, f"ROW_BLOCK {block}")


if __name__ == "__main__":
    unittest.main()
