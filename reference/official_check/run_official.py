#!/usr/bin/python3
"""Runs the OFFICIAL DeepSeek-V4 `inference/model.py` (not part of this repository: pass its path) on
CPU in float32 on a dsinfer checkpoint, to cross-check reference/model_v4.py against the official
semantics. Writes logits [T, vocab] and MTP logits [T-1, vocab] like reference/run.py:

  /usr/bin/python3 reference/official_check/run_official.py --official PATH/inference/model.py \
      --model DIR --prompt-ids @ids.txt --out off.npy [--no-kv-qdq] [--decode N] [--torch-topk]

How: the model is built in its bf16-weight mode (ModelArgs dtype "bf16", no FP4 experts) with torch's
default dtype float32, so every "bf16" activation is float32; FP8/FP4 checkpoint weights are decoded
exactly (reference/safetensors_io.py) into its parameters. The six tilelang kernels are replaced by
kernel.py in this folder, the CUDA Hadamard by an exact orthonormal matrix, the head returns every
position. torch 1.13 has no float8/float4 dtypes: the names are set to placeholders, only compared against.
`Tensor.topk` is replaced by a stable sort (exact ties -> lower index, the spec's rule; torch's CPU topk
breaks ties otherwise, which matters: exact zero indexer scores are common on small configs) unless
--torch-topk. --decode N: prefill N tokens, then the official one-token decode path for the rest.
"""
import argparse
import importlib.util
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # our kernel.py shadows the official one
sys.path.insert(1, os.path.join(HERE, ".."))

import kernel  # noqa: E402
from model_common import hadamard_matrix  # noqa: E402
from run import parse_ids  # noqa: E402
from safetensors_io import Checkpoint  # noqa: E402


def model_args(M, cfg, max_seq_len):
    rs = cfg.get("rope_scaling") or {}
    return M.ModelArgs(
        max_batch_size=1, max_seq_len=max_seq_len, dtype="bf16", scale_fmt="ue8m0", expert_dtype=None,
        scale_dtype="fp32", vocab_size=cfg["vocab_size"], dim=cfg["hidden_size"],
        moe_inter_dim=cfg["moe_intermediate_size"], n_layers=cfg["num_hidden_layers"],
        n_hash_layers=cfg.get("num_hash_layers", 0), n_mtp_layers=1, n_heads=cfg["num_attention_heads"],
        n_routed_experts=cfg["n_routed_experts"], n_shared_experts=1, n_activated_experts=cfg["num_experts_per_tok"],
        score_func="sqrtsoftplus", route_scale=cfg["routed_scaling_factor"], swiglu_limit=cfg["swiglu_limit"],
        q_lora_rank=cfg["q_lora_rank"], head_dim=cfg["head_dim"], rope_head_dim=cfg["qk_rope_head_dim"],
        norm_eps=cfg["rms_norm_eps"], o_groups=cfg["o_groups"], o_lora_rank=cfg["o_lora_rank"],
        window_size=cfg["sliding_window"], compress_ratios=tuple(cfg["compress_ratios"]),
        compress_rope_theta=cfg["compress_rope_theta"], original_seq_len=rs.get("original_max_position_embeddings", 0),
        rope_theta=cfg["rope_theta"], rope_factor=rs.get("factor", 1.0), beta_fast=rs.get("beta_fast", 32),
        beta_slow=rs.get("beta_slow", 1), index_n_heads=cfg["index_n_heads"], index_head_dim=cfg["index_head_dim"],
        index_topk=cfg["index_topk"], hc_mult=cfg["hc_mult"], hc_sinkhorn_iters=cfg["hc_sinkhorn_iters"],
        hc_eps=cfg["hc_eps"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--official", required=True, help="path of the official inference/model.py")
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--out", required=True, help="logits .npy; the MTP logits go to <out>_mtp.npy")
    ap.add_argument("--no-kv-qdq", action="store_true")
    ap.add_argument("--decode", type=int, default=0)
    ap.add_argument("--torch-topk", action="store_true")
    args = ap.parse_args()

    for name in ("float4_e2m1fn_x2", "float8_e4m3fn", "float8_e8m0fnu"):
        if not hasattr(torch, name):
            setattr(torch, name, "placeholder_" + name)
    kernel.QDQ = not args.no_kv_qdq
    if not args.torch_topk:
        def stable_topk(self, k, dim=-1, largest=True, sorted=True):
            assert largest
            o = torch.sort(self, dim=dim, descending=True, stable=True)
            return torch.return_types.topk((o.values.narrow(dim, 0, k), o.indices.narrow(dim, 0, k)))
        torch.Tensor.topk = stable_topk

    spec = importlib.util.spec_from_file_location("official_model", args.official)
    M = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(M)
    hmats = {}

    def rotate(x):
        n = x.size(-1)
        if n not in hmats:
            hmats[n] = hadamard_matrix(n, x.dtype)
        return x @ hmats[n]
    M.rotate_activation = rotate
    M.ParallelHead.get_logits = lambda self, x: F.linear(x.float(), self.weight)
    captured = []
    head_forward = M.ParallelHead.forward

    def capture_head(self, x, *rest):
        captured.append(x.clone())
        return head_forward(self, x, *rest)
    M.ParallelHead.forward = capture_head

    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    ids = parse_ids(args.prompt_ids)
    T = len(ids)
    torch.set_default_dtype(torch.float32)
    model = M.Transformer(model_args(M, cfg, max(T + 8, 64)))
    ck = Checkpoint(args.model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dtype == torch.bfloat16:
                p.data = p.data.float()
            if p.dtype in (torch.int32, torch.int64):
                p.copy_(torch.from_numpy(np.array(ck.plain(name))).to(p.dtype))
                continue
            src = ck.weight(name) if name.endswith(".weight") and p.dim() == 2 else ck.plain(name)
            p.copy_(torch.from_numpy(np.asarray(src, np.float64)).float().view(p.shape))
        for mod in model.modules():  # gather() on torch 1.13 wants int64 indices
            if isinstance(mod, M.Gate) and mod.hash:
                mod.tid2eid = torch.nn.Parameter(mod.tid2eid.data.long(), requires_grad=False)
        x = torch.tensor([ids])
        if args.decode:
            outs = [model(x[:, :args.decode], 0)]
            for p in range(args.decode, T):
                outs.append(model(x[:, p:p + 1], p))
            logits = torch.cat([o.reshape(-1, cfg["vocab_size"]) for o in outs])
        else:
            logits = model(x, 0).reshape(-1, cfg["vocab_size"])
        state = torch.cat(captured, dim=1)
        mtp = model.mtp[0](state[:, :T - 1], 0, x[:, 1:]).reshape(-1, cfg["vocab_size"])
    np.save(args.out, logits.float().numpy())
    np.save(args.out[:-4] + "_mtp.npy" if args.out.endswith(".npy") else args.out + "_mtp.npy", mtp.float().numpy())
    print(f"official model.py: {T} tokens, logits {tuple(logits.shape)}, MTP {tuple(mtp.shape)}", file=sys.stderr)


if __name__ == "__main__":
    main()
