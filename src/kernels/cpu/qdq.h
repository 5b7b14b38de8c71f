// Block quantization with power-of-two (E8M0) scales, as the reference simulates it (model-v4.md
// §2.10, §2.14 item 2): per block, s = 2^ceil(log2(amax / qmax)) with amax floored; codes are
// round-to-nearest-even of clamp(x / s). Encoding gives the compact cache formats of §3.1; decoding
// them reproduces the quantize-dequantized values exactly.
#pragma once

#include <cstdint>

namespace dsinfer::kernels {

// FP8 E4M3 codes (1 byte each) + one E8M0 scale byte per `block` values; n % block == 0.
void fp8_block_encode(const float* x, int64_t n, int64_t block, uint8_t* codes, uint8_t* scales);
void fp8_block_decode(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, float* y);
// The same values as bf16, each the high half of the float fp8_block_decode gives. That is the exact
// value whenever the scale is at least 2^-117 (every decoded value is then a normal float with at most
// 4 significant bits); encoding's amax floor keeps its scales far above that.
void fp8_block_decode_bf16(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, uint16_t* y);
void fp8_block_decode_scalar(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, float* y);

// FP4 E2M1 codes packed two per byte (element 2c low nibble) + one E8M0 scale per `block` values.
void fp4_block_encode(const float* x, int64_t n, int64_t block, uint8_t* packed, uint8_t* scales);
void fp4_block_decode(const uint8_t* packed, const uint8_t* scales, int64_t n, int64_t block, float* y);
// n packed FP4 E2M1 codes times one scale s (a block of any scale format, e.g. V4.1's E4M3 ones).
void fp4_decode_scaled(const uint8_t* packed, int64_t n, float s, float* y);

// Quantize-dequantize in place (the reference's activation quantization in front of FP8/FP4 GEMMs,
// block 128, and its in-place QDQ of KV / indexer vectors).
void fp8_block_qdq(float* x, int64_t n, int64_t block);
void fp4_block_qdq(float* x, int64_t n, int64_t block);

}  // namespace dsinfer::kernels
