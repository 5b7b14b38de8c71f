#!/usr/bin/env python3
"""Runs llama.cpp's own convert_hf_to_gguf.py, unchanged, on a DeepSeek-V4 checkpoint with Debian 12's Python.

llama.cpp's converter imports `transformers` and needs a torch with float8 dtypes (2.1 or later). Debian 12
packages neither (python3-torch is 1.13; there is no python3-transformers), so on a machine whose Python
packages come from Debian alone the converter stops at its imports. This wrapper fills exactly those two
gaps and leaves the rest of the conversion (tensor mapping, MXFP4 expert repacking, quantization, GGUF
metadata) to the converter:

- `transformers` is replaced by a stand-in module. `AutoConfig.from_pretrained` raises, which makes the
  converter take its own fallback of reading config.json. `AutoTokenizer.from_pretrained` reads vocabulary
  and added tokens from tokenizer.json and encodes/decodes through `dsinfer tokenize` on that same file, so
  the converter's pre-tokenizer check (the hash of a probe text's token ids) runs as written.
- torch 1.13 has no float8 dtype: F8_E4M3 weights are read as their raw bytes, and the DeepSeek-V4 model
  class's FP8 dequantization is replaced by this repository's reference decoder (reference/formats.py:
  E4M3 values times their 128x128 UE8M0 block scales), the same product the converter computes with
  torch's own float8 dtype.

Usage (every argument after the environment goes to convert_hf_to_gguf.py):
  LLAMA_CPP=~/llama.cpp DSINFER_BIN=build/release/src/cli/dsinfer \\
    /usr/bin/python3 bench/compare/convert_gguf.py MODEL_DIR --outfile model.gguf --outtype q8_0
"""
import json
import os
import runpy
import struct
import subprocess
import sys
import types
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def safetensors_dtypes(model_dir):
    """Tensor name -> safetensors dtype string, read from the headers of every .safetensors file."""
    dtypes = {}
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for name, info in header.items():
            if name != "__metadata__":
                dtypes[name] = info["dtype"]
    return dtypes


class DsinferTokenizer:
    """Just the part of a transformers fast tokenizer that the converter's BPE vocabulary export uses."""

    def __init__(self, model_dir, binary):
        self.path = os.path.join(model_dir, "tokenizer.json")
        self.binary = binary
        with open(self.path, encoding="utf-8") as f:
            spec = json.load(f)
        post = spec.get("post_processor")
        # encode() below adds nothing around the ids; a post-processor that adds BOS/EOS would change the
        # converter's pre-tokenizer hash, so refuse rather than answer differently from transformers.
        if post is not None and post.get("type") not in ("ByteLevel",):
            sys.exit(f"convert_gguf: tokenizer.json post_processor {post.get('type')!r} is not supported here")
        self.vocab = dict(spec["model"]["vocab"])
        self._added = {}
        self.added_tokens_decoder = {}
        for tok in spec.get("added_tokens", []):
            self.vocab[tok["content"]] = tok["id"]
            self._added[tok["content"]] = tok["id"]
            self.added_tokens_decoder[tok["id"]] = types.SimpleNamespace(
                content=tok["content"], normalized=tok.get("normalized", False), special=tok.get("special", False))
        self._encoded = {}
        self._decoded = {}
        # The converter round-trips every non-normalized added token one by one; do them in two processes.
        texts = [t.content for t in self.added_tokens_decoder.values() if not t.normalized]
        self._encode_many(texts)
        self._decode_many([self._encoded[t] for t in texts])

    def _tokenize(self, lines, decode):
        cmd = [self.binary, "tokenize", "--tokenizer", self.path] + (["--decode"] if decode else [])
        stdin = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
        out = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=True).stdout.splitlines()
        if len(out) != len(lines):
            sys.exit(f"convert_gguf: dsinfer tokenize answered {len(out)} lines for {len(lines)}")
        return [json.loads(line) for line in out]

    def _encode_many(self, texts):
        todo = [t for t in dict.fromkeys(texts) if t not in self._encoded]
        if todo:
            for text, res in zip(todo, self._tokenize([{"text": t} for t in todo], decode=False)):
                self._encoded[text] = tuple(res["ids"])

    def _decode_many(self, id_lists):
        todo = [ids for ids in dict.fromkeys(tuple(i) for i in id_lists) if ids not in self._decoded]
        if todo:
            for ids, res in zip(todo, self._tokenize([{"ids": list(i)} for i in todo], decode=True)):
                self._decoded[ids] = res["text"]

    def get_vocab(self):
        return dict(self.vocab)

    def get_added_vocab(self):
        return dict(self._added)

    def encode(self, text, add_special_tokens=True):
        del add_special_tokens  # the ByteLevel post-processor adds no special tokens either way
        self._encode_many([text])
        return list(self._encoded[text])

    def decode(self, ids, **kwargs):
        del kwargs
        self._decode_many([ids])
        return self._decoded[tuple(ids)]


def install_transformers_stand_in(binary):
    module = types.ModuleType("transformers")

    class AutoConfig:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            raise RuntimeError("no transformers here: read config.json")

    class AutoTokenizer:
        @staticmethod
        def from_pretrained(model_dir, *args, **kwargs):
            return DsinferTokenizer(str(model_dir), binary)

    module.AutoConfig = AutoConfig
    module.AutoTokenizer = AutoTokenizer
    sys.modules["transformers"] = module


def install_fp8_dequant(torch, model_dir):
    """Gives torch 1.13 the float8 names the converter refers to and dequantizes FP8 weights with the reference decoder."""
    if hasattr(torch, "float8_e4m3fn"):
        return  # a torch with real float8 dtypes: the converter's own dequantization applies
    for name in ("float8_e4m3fn", "float8_e5m2"):
        # The raw bytes: the converter's safetensors reader views F8 tensors as this dtype.
        setattr(torch, name, torch.uint8)

    from conversion.base import LazyTorchTensor
    from conversion.deepseek import DeepseekV4Model

    sys.path.insert(0, os.path.join(REPO, "reference"))
    import formats  # this repository's reference decoders, checked in reference/tests/test_formats.py

    fp8_names = {n for n, d in safetensors_dtypes(model_dir).items() if d == "F8_E4M3"}

    def dequant(weight, scale):
        values = formats.decode_e4m3(weight.numpy())
        return torch.from_numpy(formats.dequant_fp8_blocks(values, formats.decode_e8m0(scale.numpy()))).float()

    def dequant_model(self):
        for weight_name in sorted(fp8_names):
            scale_name = weight_name.removesuffix(".weight") + ".scale"
            if weight_name not in self.model_tensors:
                continue  # filtered out by the converter (the MTP layer)
            weight = self.model_tensors[weight_name]
            scale = self.model_tensors.pop(scale_name)
            # Eager: torch 1.13 cannot repeat_interleave the converter's lazy (meta) tensors.
            self.model_tensors[weight_name] = lambda w=weight, s=scale: LazyTorchTensor.from_eager(
                dequant(LazyTorchTensor.to_eager(w()), LazyTorchTensor.to_eager(s())))
            self._dsv4_fp8_dequantized.add(weight_name)

    DeepseekV4Model.dequant_model = dequant_model


def main():
    llama = os.environ.get("LLAMA_CPP")
    if not llama or not os.path.isfile(os.path.join(llama, "convert_hf_to_gguf.py")):
        sys.exit("convert_gguf: set LLAMA_CPP to a llama.cpp checkout holding convert_hf_to_gguf.py")
    binary = os.environ.get("DSINFER_BIN", os.path.join(REPO, "build", "release", "src", "cli", "dsinfer"))
    args = [a for a in sys.argv[1:]]
    model_dir = next((a for a in args if not a.startswith("-") and os.path.isdir(a)), None)
    if model_dir is None:
        sys.exit("convert_gguf: give the checkpoint directory (then the converter's own flags)")

    sys.path[:0] = [llama, os.path.join(llama, "gguf-py")]
    import torch  # noqa: E402 (after the path, like the converter)

    install_transformers_stand_in(binary)
    install_fp8_dequant(torch, model_dir)
    script = os.path.join(llama, "convert_hf_to_gguf.py")
    sys.argv = [script] + args
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
