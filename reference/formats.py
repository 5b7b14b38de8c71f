"""Number formats of DeepSeek-V4 checkpoints and the quantize-dequantize (QDQ) simulations.

Written from model-v4.md §4.3 (formats) and §2.10 / §2.14 items 1-2 (QDQ). Everything here is exact:
decoded weights are exact in float32/float64, and QDQ rounds with round-to-nearest-even.
"""
import math

import numpy as np
import torch

# ---------------------------------------------------------------------------------------------
# Decode tables (from the bit definitions, never from a library cast)


def e4m3_value(code):
    """Value of one F8_E4M3 (float8_e4m3fn) byte: 1 sign, 4 exponent (bias 7), 3 mantissa bits.
    No infinities; S.1111.111 is NaN; exponent 0 is subnormal: 2^-6 * m/8."""
    sign = -1.0 if code & 0x80 else 1.0
    exp = (code >> 3) & 0xF
    man = code & 0x7
    if exp == 0xF and man == 0x7:
        return float("nan")
    if exp == 0:
        return sign * math.ldexp(man / 8.0, -6)
    return sign * math.ldexp(1.0 + man / 8.0, exp - 7)


def e2m1_value(nibble):
    """Value of one FP4 E2M1 nibble: bit 3 sign, bits 0-2 index {0, .5, 1, 1.5, 2, 3, 4, 6}."""
    mags = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
    v = mags[nibble & 0x7]
    return -v if nibble & 0x8 else v


def e8m0_value(code):
    """Value of one F8_E8M0 (UE8M0) byte: 2^(code-127); 0xFF is NaN."""
    if code == 0xFF:
        return float("nan")
    return math.ldexp(1.0, code - 127)


E4M3_TABLE = np.array([e4m3_value(c) for c in range(256)], dtype=np.float64)
E8M0_TABLE = np.array([e8m0_value(c) for c in range(256)], dtype=np.float64)
E2M1_TABLE = np.array([e2m1_value(n) for n in range(16)], dtype=np.float64)
# Byte -> (low nibble value, high nibble value): low nibble is the even logical column.
FP4_PAIR_TABLE = np.stack([E2M1_TABLE[np.arange(256) & 0xF], E2M1_TABLE[np.arange(256) >> 4]], axis=1)

E4M3_TABLE32 = E4M3_TABLE.astype(np.float32)

E4M3_MAX = 448.0
E2M1_MAX = 6.0


def decode_bf16(raw_u16):
    """uint16 array of bf16 bit patterns -> float32 (exact)."""
    return (raw_u16.astype(np.uint32) << 16).view(np.float32)


def decode_e4m3(raw_u8):
    """F8_E4M3 bytes -> float32 values (exact)."""
    return E4M3_TABLE32[raw_u8]


def decode_e8m0(raw_u8):
    return E8M0_TABLE[raw_u8]


# The pair table as one 8-byte word per byte value: a single gather decodes both nibbles.
_FP4_PAIR_WORDS = np.ascontiguousarray(FP4_PAIR_TABLE.astype("<f4")).view("<u8").reshape(256)


def decode_fp4_packed(raw_u8):
    """[rows, cols/2] packed bytes -> [rows, cols] E2M1 values (float32, exact)."""
    words = np.take(_FP4_PAIR_WORDS, np.ascontiguousarray(raw_u8))
    return words.view("<f4").reshape(raw_u8.shape[0], raw_u8.shape[1] * 2)


def _exact_in_float32(values_max, scale):
    """value * scale is exact in float32 when neither overflows nor falls below the subnormal grid
    (FP8/FP4 values have at most 3 significant bits and are >= 2^-9 in magnitude when non-zero)."""
    finite = scale[np.isfinite(scale)]
    if finite.size == 0:
        return True
    return float(finite.max()) * values_max < 2.0 ** 127 and float(finite.min()) * 2.0 ** -9 >= 2.0 ** -146


def dequant_fp8_blocks(values, scale, block=128):
    """W[i][j] = values[i][j] * scale[i div block][j div block] (scale grid ceil(out/b) x ceil(in/b))."""
    out, inn = values.shape
    gr, gc = (out + block - 1) // block, (inn + block - 1) // block
    if scale.shape != (gr, gc):
        raise ValueError(f"FP8 block scale has shape {scale.shape}, expected {(gr, gc)} for weight {values.shape}")
    dt = np.float32 if _exact_in_float32(448.0, scale) else np.float64
    padded = np.zeros((gr * block, gc * block), dtype=dt)
    padded[:out, :inn] = values
    w = padded.reshape(gr, block, gc, block) * scale.astype(dt)[:, None, :, None]
    return w.reshape(gr * block, gc * block)[:out, :inn]


def dequant_fp4_blocks(values, scale, block=32):
    """W[i][j] = values[i][j] * scale[i][j div block] (scale shape [out, in/block])."""
    out, inn = values.shape
    if scale.shape != (out, inn // block) or inn % block:
        raise ValueError(f"FP4 scale has shape {scale.shape}, expected {(out, inn // block)} for weight {values.shape}")
    dt = np.float32 if _exact_in_float32(6.0, scale) else np.float64
    w = values.astype(dt, copy=False).reshape(out, inn // block, block) * scale.astype(dt)[:, :, None]
    return w.reshape(out, inn)


# ---------------------------------------------------------------------------------------------
# Rounding and QDQ (torch, any floating dtype; the arithmetic is exact in float64 and float32)


def round_minifloat(y, mbits, emin):
    """Round finite values to a binary format with `mbits` mantissa bits, minimum normal exponent
    `emin` (subnormals below) and unbounded range, to nearest, ties to even. Callers clamp first."""
    a = y.abs().to(torch.float64)
    _, e = torch.frexp(a)  # a = m * 2^e with m in [0.5, 1): leading bit is 2^(e-1)
    lead = torch.clamp(e - 1, min=emin)
    quantum = torch.ldexp(torch.ones_like(a), (lead - mbits).to(torch.float64))
    r = torch.round(a / quantum) * quantum  # torch.round is round-half-to-even
    return torch.where(y < 0, -r, r).to(y.dtype)


def round_e4m3(y):
    return round_minifloat(y, 3, -6)


def round_e2m1(y):
    return round_minifloat(y, 1, 0)


def pow2_scale(amax, qmax, amax_floor):
    """s = 2^ceil(log2(max(amax, floor) / qmax)), from the IEEE bits of the fp32 product
    amax * fp32(1/qmax) (exponent, plus one if any mantissa bit is set) as the reference does."""
    a = torch.clamp(amax.to(torch.float32), min=torch.tensor(amax_floor, dtype=torch.float32).item())
    prod = a * torch.tensor(1.0 / qmax, dtype=torch.float32)
    bits = prod.view(torch.int32)
    exp = (bits >> 23) & 0xFF
    man = bits & 0x7FFFFF
    k = exp - 127 + (man != 0).to(torch.int32)
    return torch.ldexp(torch.ones(k.shape, dtype=torch.float64), k.to(torch.float64))


def _blockwise_qdq(x, block, qmax, amax_floor, rounder):
    shape = x.shape
    if shape[-1] % block:
        raise ValueError(f"QDQ block {block} does not divide the last dim {shape[-1]}")
    xb = x.reshape(*shape[:-1], shape[-1] // block, block)
    s = pow2_scale(xb.abs().amax(dim=-1, keepdim=True), qmax, amax_floor).to(x.dtype)
    q = rounder(torch.clamp(xb / s, -qmax, qmax))
    return (q * s).reshape(shape)


def fp8_qdq(x, block=64):
    """FP8 E4M3 quantize-dequantize per block along the last dim (KV QAT simulation, and the
    activation quantization of the 'reference numerics' mode with block 128)."""
    return _blockwise_qdq(x, block, E4M3_MAX, 1e-4, round_e4m3)


def fp4_qdq(x, block=32):
    """FP4 E2M1 quantize-dequantize per block along the last dim (indexer QAT simulation)."""
    return _blockwise_qdq(x, block, E2M1_MAX, 6.0 * 2.0 ** -126, round_e2m1)


def round_bf16(x):
    """Round to bfloat16 (nearest even) and back to x's dtype; used only by 'reference numerics'."""
    return x.to(torch.float32).to(torch.bfloat16).to(x.dtype)
