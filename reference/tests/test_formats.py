"""Self-checks of reference/formats.py and reference/safetensors_io.py against independent definitions.

Run: /usr/bin/python3 -m unittest discover -s reference/tests -p 'test_formats.py'
"""
import json
import math
import os
import struct
import sys
import tempfile
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import formats  # noqa: E402
from safetensors_io import Checkpoint, CheckpointError  # noqa: E402


def e4m3_via_float32_bits(code):
    """Independent decoding: rebuild the value as an IEEE float32 bit pattern."""
    sign, exp, man = code >> 7, (code >> 3) & 0xF, code & 7
    if exp == 15 and man == 7:
        return float("nan")
    if exp == 0:  # subnormal: man * 2^-9, exact as a Python float
        v = man * 2.0 ** -9
    else:
        bits = ((exp - 7 + 127) << 23) | (man << 20)
        v = struct.unpack("<f", struct.pack("<I", bits))[0]
    return -v if sign else v


def e2m1_via_float32_bits(nib):
    sign, exp, man = nib >> 3, (nib >> 1) & 3, nib & 1
    if exp == 0:
        v = 0.5 * man
    else:
        v = struct.unpack("<f", struct.pack("<I", ((exp - 1 + 127) << 23) | (man << 22)))[0]
    return -v if sign else v


def nearest_even_code(x, values, mantissa_lsb):
    """Brute force: the representable value nearest to x; on an exact tie the one whose mantissa LSB is 0."""
    d = np.abs(values - x)
    best = d.min()
    cands = np.nonzero(d == best)[0]
    if len(cands) == 1:
        return values[cands[0]]
    even = [c for c in cands if mantissa_lsb[c] == 0]
    assert len(even) == 1, (x, values[cands])
    return values[even[0]]


def format_values(table):
    """Sorted distinct finite values of a code table and each value's mantissa LSB (the code's
    lowest bit in both E4M3 and E2M1; +0 and -0 merge into one value with LSB 0)."""
    lsb_of = {}
    for c in range(len(table)):
        if np.isfinite(table[c]):
            lsb_of[float(table[c])] = c & 1
    values = np.array(sorted(lsb_of))
    return values, np.array([lsb_of[v] for v in values])


class TestTables(unittest.TestCase):
    def test_e4m3_every_code(self):
        for c in range(256):
            want = e4m3_via_float32_bits(c)
            got = formats.E4M3_TABLE[c]
            if math.isnan(want):
                self.assertTrue(math.isnan(got), c)
            else:
                self.assertEqual(got, want, c)
        self.assertEqual(formats.E4M3_TABLE[0x7E], 448.0)
        self.assertEqual(formats.E4M3_TABLE[0xFE], -448.0)
        self.assertEqual(formats.E4M3_TABLE[0x38], 1.0)
        self.assertEqual(formats.E4M3_TABLE[0x01], 2.0 ** -9)
        self.assertEqual(formats.E4M3_TABLE[0x08], 2.0 ** -6)
        self.assertEqual(int(np.isnan(formats.E4M3_TABLE).sum()), 2)

    def test_e2m1_every_code(self):
        self.assertEqual(list(formats.E2M1_TABLE[:8]), [0, 0.5, 1, 1.5, 2, 3, 4, 6])
        for n in range(16):
            self.assertEqual(formats.E2M1_TABLE[n], e2m1_via_float32_bits(n), n)

    def test_e8m0_every_code(self):
        for c in range(255):
            self.assertEqual(formats.E8M0_TABLE[c], 2.0 ** (c - 127))
        self.assertTrue(math.isnan(formats.E8M0_TABLE[255]))

    def test_bf16(self):
        vals = np.array([1.0, -2.5, 3.140625, 2.0 ** -100, 65280.0], dtype=np.float32)
        raw = (vals.view(np.uint32) >> 16).astype(np.uint16)  # these values are exact in bf16
        np.testing.assert_array_equal(formats.decode_bf16(raw), vals)

    def test_fp4_packing_low_nibble_even_column(self):
        raw = np.array([[0x21, 0xF7]], dtype=np.uint8)  # cols: 0.5, 1.0, 6.0, -6.0
        np.testing.assert_array_equal(formats.decode_fp4_packed(raw), [[0.5, 1.0, 6.0, -6.0]])

    def test_fp8_block_dequant(self):
        vals = np.ones((130, 260))
        scale = np.array([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]])
        w = formats.dequant_fp8_blocks(vals, scale)
        self.assertEqual(w[0, 0], 1.0)
        self.assertEqual(w[127, 128], 2.0)
        self.assertEqual(w[128, 255], 16.0)
        self.assertEqual(w[129, 259], 32.0)
        with self.assertRaises(ValueError):
            formats.dequant_fp8_blocks(vals, scale[:1])


class TestRounding(unittest.TestCase):
    def _check_format(self, table, rounder, maxv):
        values, lsb = format_values(table)
        # every representable value is a fixed point
        t = torch.tensor(values, dtype=torch.float64)
        np.testing.assert_array_equal(rounder(t).numpy(), values)
        # midpoints round to the even neighbour, points just off them to the nearest
        mids = (values[:-1] + values[1:]) / 2
        got = rounder(torch.tensor(mids)).numpy()
        want = [nearest_even_code(m, values, lsb) for m in mids]
        np.testing.assert_array_equal(got, want)
        for eps in (1e-9, -1e-9):
            off = mids * (1 + eps) + eps
            np.testing.assert_array_equal(rounder(torch.tensor(off)).numpy(),
                                          [nearest_even_code(x, values, lsb) for x in off])
        rng = np.random.default_rng(0)
        xs = rng.uniform(-maxv, maxv, 4000) * rng.choice([1, 1e-1, 1e-2, 1e-3], 4000)
        np.testing.assert_array_equal(rounder(torch.tensor(xs)).numpy(),
                                      [nearest_even_code(x, values, lsb) for x in xs])
        # float32 inputs give the same result
        x32 = torch.tensor(xs, dtype=torch.float32)
        np.testing.assert_array_equal(rounder(x32).numpy(), rounder(x32.double()).float().numpy())

    def test_round_e4m3(self):
        self._check_format(formats.E4M3_TABLE, formats.round_e4m3, 448.0)

    def test_round_e2m1(self):
        self._check_format(formats.E2M1_TABLE, formats.round_e2m1, 6.0)


def independent_pow2_scale(amax, qmax, floor):
    a = max(np.float32(amax), np.float32(floor))
    prod = np.float32(a) * np.float32(1.0 / qmax)
    m, e = math.frexp(float(prod))  # prod = m * 2^e, m in [0.5, 1)
    k = e - 1 if m == 0.5 else e  # ceil(log2(prod))
    return 2.0 ** k


class TestQDQ(unittest.TestCase):
    def test_scale_matches_independent(self):
        rng = np.random.default_rng(1)
        amaxes = np.concatenate([rng.lognormal(0, 4, 500), 448.0 * 2.0 ** np.arange(-10, 10),
                                 6.0 * 2.0 ** np.arange(-10, 10), [0.0, 1e-7, 1e-4]])
        for qmax, floor in ((448.0, 1e-4), (6.0, 6.0 * 2.0 ** -126)):
            got = formats.pow2_scale(torch.tensor(amaxes), qmax, floor).numpy()
            want = [independent_pow2_scale(a, qmax, floor) for a in amaxes]
            np.testing.assert_array_equal(got, want)

    def _check_qdq(self, qdq, block, qmax, floor, table):
        values, lsb = format_values(table)
        rng = np.random.default_rng(2)
        x = torch.tensor(rng.normal(0, 1, (7, 4 * block)) * rng.lognormal(0, 3, (7, 1)))
        x[3, :block] = 0.0  # an all-zero block
        y = qdq(x, block)
        xb = x.view(7, 4, block).numpy()
        yb = y.view(7, 4, block).numpy()
        for i in range(7):
            for j in range(4):
                s = independent_pow2_scale(np.abs(xb[i, j]).max(), qmax, floor)
                want = [nearest_even_code(v, values, lsb) * s for v in np.clip(xb[i, j] / s, -qmax, qmax)]
                np.testing.assert_array_equal(yb[i, j], want)
        self.assertTrue(torch.equal(y[3, :block], torch.zeros(block, dtype=y.dtype)))

    def test_fp8_qdq(self):
        self._check_qdq(formats.fp8_qdq, 64, 448.0, 1e-4, formats.E4M3_TABLE)

    def test_fp4_qdq(self):
        self._check_qdq(formats.fp4_qdq, 32, 6.0, 6.0 * 2.0 ** -126, formats.E2M1_TABLE)

    def test_qdq_idempotent_and_dtype(self):
        x = torch.randn(5, 128, dtype=torch.float64)
        for qdq, b in ((formats.fp8_qdq, 64), (formats.fp4_qdq, 32)):
            y = qdq(x, b)
            self.assertTrue(torch.equal(qdq(y, b), y))
            y32 = qdq(x.float(), b)
            self.assertEqual(y32.dtype, torch.float32)
            self.assertTrue(torch.equal(y32.double(), qdq(x.float().double(), b)))


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, (dtype, arr) in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


class TestSafetensors(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def test_read_all_formats(self):
        rng = np.random.default_rng(3)
        bf = np.array([[1.0, -0.5], [3.0, 0.0078125]], dtype=np.float32)
        fp8_codes = rng.integers(0, 0x7E, (130, 140)).astype(np.uint8)
        fp8_scale = np.array([[120, 121], [127, 130]], dtype=np.uint8)
        fp4 = rng.integers(0, 256, (3, 32)).astype(np.uint8)  # logical [3, 64]
        fp4_scale = np.array([[127, 128], [126, 127], [120, 130]], dtype=np.uint8)
        tid = rng.integers(0, 16, (10, 2)).astype(np.int64)
        write_safetensors(os.path.join(self.dir.name, "a.safetensors"), {
            "b.weight": ("BF16", (bf.view(np.uint32) >> 16).astype(np.uint16)),
            "q.weight": ("F8_E4M3", fp8_codes), "q.scale": ("F8_E8M0", fp8_scale),
            "f.weight": ("I8", fp4), "f.scale": ("F8_E8M0", fp4_scale),
        })
        write_safetensors(os.path.join(self.dir.name, "b.safetensors"), {
            "t.tid2eid": ("I64", tid), "s": ("F32", np.array([0.25, 2.0], dtype=np.float32)),
            "g.weight": ("F8_E4M3", fp8_codes[:128, :128]), "g.scale": ("F32", np.array([[0.375]], dtype=np.float32)),
        })
        with open(os.path.join(self.dir.name, "model.safetensors.index.json"), "w") as f:
            json.dump({"weight_map": {"b.weight": "a.safetensors", "t.tid2eid": "b.safetensors"}}, f)
        ck = Checkpoint(self.dir.name)
        np.testing.assert_array_equal(ck.weight("b.weight"), bf)
        w = ck.weight("q.weight")
        for (i, j) in ((0, 0), (127, 139), (128, 0), (129, 128), (5, 130)):
            s = 2.0 ** (fp8_scale[i // 128, j // 128] - 127)
            self.assertEqual(w[i, j], e4m3_via_float32_bits(int(fp8_codes[i, j])) * s)
        f4 = ck.weight("f.weight")
        self.assertEqual(f4.shape, (3, 64))
        for i in range(3):
            for j in range(64):
                byte = int(fp4[i, j // 2])
                nib = byte & 0xF if j % 2 == 0 else byte >> 4
                self.assertEqual(f4[i, j], e2m1_via_float32_bits(nib) * 2.0 ** (fp4_scale[i, j // 32] - 127))
        np.testing.assert_array_equal(ck.plain("t.tid2eid"), tid)
        np.testing.assert_array_equal(ck.plain("s"), [0.25, 2.0])
        self.assertEqual(ck.weight("g.weight")[1, 2], e4m3_via_float32_bits(int(fp8_codes[1, 2])) * 0.375)
        self.assertTrue(ck.is_quantized("q.weight") and ck.is_quantized("f.weight"))
        self.assertFalse(ck.is_quantized("b.weight"))
        with self.assertRaises(CheckpointError):
            ck.weight("missing.weight")

    def test_errors(self):
        p = os.path.join(self.dir.name, "x.safetensors")
        write_safetensors(p, {"q.weight": ("F8_E4M3", np.zeros((4, 4), np.uint8))})
        with self.assertRaisesRegex(CheckpointError, "q.scale"):
            Checkpoint(p).weight("q.weight")
        with open(p, "r+b") as f:  # corrupt the offsets: header claims more data than there is
            h = f.read()
        bad = h.replace(b'"data_offsets": [0, 16]', b'"data_offsets": [0, 99]')
        with open(p, "wb") as f:
            f.write(bad)
        with self.assertRaisesRegex(CheckpointError, "offsets"):
            Checkpoint(p).raw("q.weight")
        with open(p, "wb") as f:
            f.write(b"\x01")
        with self.assertRaises(CheckpointError):
            Checkpoint(p)


if __name__ == "__main__":
    unittest.main()
