"""Reads safetensors checkpoints (one file, or a sharded Hugging Face directory) with numpy mmap and
decodes DeepSeek-V4 weights exactly (model-v4.md §4.1, §4.3).

File layout: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets:
[begin, end]}, "__metadata__": {...}}, then the data; offsets are relative to the end of the header.
"""
import json
import os
import struct

import numpy as np

import formats

_RAW_DTYPES = {
    "BF16": np.uint16, "F16": np.float16, "F32": np.float32, "F64": np.float64,
    "F8_E4M3": np.uint8, "F8_E8M0": np.uint8, "I8": np.uint8, "U8": np.uint8,
    "I16": np.int16, "I32": np.int32, "I64": np.int64, "BOOL": np.uint8,
}


class CheckpointError(Exception):
    pass


class _File:
    def __init__(self, path):
        self.path = path
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{path}: too short for a safetensors header")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise CheckpointError(f"{path}: header length {n} exceeds the file size {size}")
            try:
                self.header = json.loads(f.read(n))
            except ValueError as e:
                raise CheckpointError(f"{path}: header is not JSON: {e}")
        self.data_start = 8 + n
        self.data_len = size - self.data_start
        self.header.pop("__metadata__", None)
        self._mm = np.memmap(path, dtype=np.uint8, mode="r") if size > 0 else None

    def raw(self, name):
        info = self.header[name]
        dt = info["dtype"]
        if dt not in _RAW_DTYPES:
            raise CheckpointError(f"{self.path}: tensor {name} has unsupported dtype {dt}")
        npdt = np.dtype(_RAW_DTYPES[dt]).newbyteorder("<")
        shape = tuple(info["shape"])
        begin, end = info["data_offsets"]
        count = int(np.prod(shape)) if shape else 1
        if end - begin != count * npdt.itemsize or end > self.data_len or begin < 0:
            raise CheckpointError(f"{self.path}: tensor {name} offsets {begin}..{end} do not match "
                                  f"dtype {dt} shape {list(shape)} (data size {self.data_len})")
        buf = self._mm[self.data_start + begin:self.data_start + end]
        return buf.view(npdt).reshape(shape)


class Checkpoint:
    """A checkpoint directory (config.json + *.safetensors, optionally with
    model.safetensors.index.json) or a single .safetensors file. `fp8_block`: the edge of the FP8
    weight scale blocks (128 in V4, 32 in V4.1)."""

    def __init__(self, path, fp8_block=128):
        self.path = path
        self.fp8_block = fp8_block
        self._where = {}
        files = []
        if os.path.isdir(path):
            index = os.path.join(path, "model.safetensors.index.json")
            if os.path.exists(index):
                with open(index) as f:
                    weight_map = json.load(f)["weight_map"]
                files = sorted(set(weight_map.values()))
            else:
                files = sorted(x for x in os.listdir(path) if x.endswith(".safetensors"))
            if not files:
                raise CheckpointError(f"{path}: no .safetensors files")
            files = [os.path.join(path, x) for x in files]
        else:
            files = [path]
        self._files = [_File(p) for p in files]
        for f in self._files:
            for name in f.header:
                if name in self._where:
                    raise CheckpointError(f"tensor {name} appears in both {self._where[name].path} and {f.path}")
                self._where[name] = f

    def names(self):
        return list(self._where)

    def __contains__(self, name):
        return name in self._where

    def _file(self, name):
        if name not in self._where:
            raise CheckpointError(f"{self.path}: missing tensor {name}")
        return self._where[name]

    def dtype(self, name):
        return self._file(name).header[name]["dtype"]

    def shape(self, name):
        return tuple(self._file(name).header[name]["shape"])

    def raw(self, name):
        """The stored array without any decoding (bf16/fp8/fp4 as unsigned bytes or words)."""
        return self._file(name).raw(name)

    def plain(self, name, rows=None):
        """A non-quantized tensor decoded to float32 (BF16, F16, F32) / float64 (F64) or int64.
        `rows` optionally selects rows first (used for embedding lookups)."""
        dt = self.dtype(name)
        raw = self.raw(name)
        if rows is not None:
            raw = raw[rows]
        if dt == "BF16":
            return formats.decode_bf16(np.ascontiguousarray(raw))
        if dt in ("F32", "F16", "F64"):
            return np.asarray(raw, dtype=np.float64 if dt == "F64" else np.float32)
        if dt in ("I64", "I32", "I16"):
            return np.asarray(raw, dtype=np.int64)
        raise CheckpointError(f"{self.path}: tensor {name} has dtype {dt}; expected BF16/F32/I64 here")

    def _scale(self, name):
        dt = self.dtype(name)
        raw = self.raw(name)
        if dt == "F8_E8M0":
            return formats.decode_e8m0(raw)
        if dt == "F32":
            return np.asarray(raw, dtype=np.float64)
        raise CheckpointError(f"{self.path}: scale {name} has dtype {dt}; expected F8_E8M0 or F32")

    def weight(self, name):
        """A linear weight [out, in] decoded exactly (float32 where that is exact, else float64), whatever its storage:
        BF16/F32; F8_E4M3 with fp8_block x fp8_block block scales `<base>.scale`; FP4 E2M1 packed in I8
        ([out, in/2], low nibble = even column) with 1x32 E8M0 scales."""
        dt = self.dtype(name)
        base = name[:-len(".weight")] if name.endswith(".weight") else name
        scale_name = base + ".scale"
        if dt == "F8_E4M3":
            values = formats.decode_e4m3(self.raw(name))
            if scale_name not in self:
                raise CheckpointError(f"{self.path}: FP8 tensor {name} has no {scale_name}")
            scale = self._scale(scale_name)
            try:
                return formats.dequant_fp8_blocks(values, scale, self.fp8_block)
            except ValueError as e:
                raise CheckpointError(f"{self.path}: {name}: {e}")
        if dt == "I8" or dt == "U8":
            if scale_name not in self:
                raise CheckpointError(f"{self.path}: packed FP4 tensor {name} has no {scale_name}")
            raw = self.raw(name)
            if raw.ndim != 2:
                raise CheckpointError(f"{self.path}: packed FP4 tensor {name} must be 2-D, has shape {list(raw.shape)}")
            values = formats.decode_fp4_packed(raw)
            scale = self._scale(scale_name)
            try:
                return formats.dequant_fp4_blocks(values, scale)
            except ValueError as e:
                raise CheckpointError(f"{self.path}: {name}: {e}")
        return self.plain(name)

    def is_quantized(self, name):
        """True when the weight is stored FP8 or FP4 (the reference quantizes activations before it)."""
        return self.dtype(name) in ("F8_E4M3", "I8", "U8")
