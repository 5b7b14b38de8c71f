#!/usr/bin/python3
"""Properties of reference/model_v41.py on a real V4.1 checkpoint (e.g. `dsinfer mkmodel --config
configs/tiny-v41.json --seed 1 --out T41`), and what a prompt exercises:

  * causality / prompt-prefix property: the logits of a prefix prefilled alone equal the first rows of
    the full prompt's logits (compressors, selections, candidate masks and Engram look only back);
  * the three QDQ steps are effective (turning them off changes the logits);
  * coverage: every index source prunes (selects fewer than its visible entries) for some query; the
    candidate restriction changes the top-k of some candidate user; Engram gates are spread in (0, 1);
  * DSpark: the draft rounds of a prefix are the same whether its taps come from the prefix alone or
    from the full prompt (taps look only back);
  * 'reference' numerics: the activation QDQ lands in front of exactly the GEMMs the official V4.1 code
    quantizes (wq_a, wq_b, wkv, wo_b, indexer.wq_b, routed and shared experts, engram.wkv), and it moves
    the logits away from plain (finite, more than 1e-3 median row difference).

Usage: /usr/bin/python3 reference/tests/model_v41_props_check.py --model T41 [--tokens 300]
"""
import argparse
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from model_v41 import DeepseekV41Reference  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--prefix", type=int, default=97)
    args = ap.parse_args()
    ids = np.random.default_rng(5).integers(0, 128000, size=args.tokens).tolist()
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    with torch.no_grad():
        m = DeepseekV41Reference(args.model, trace=True)
        full, taps = m.forward(ids)
        cfg = m.cfg
        trace = dict(m.trace)
        pre = DeepseekV41Reference(args.model)
        part, _ = pre.forward(ids[:args.prefix])
        d = float((full[:args.prefix] - part).abs().max())
        check(d < 1e-9, f"prefix property: max |logits(prefix) - logits(full)[:prefix]| = {d:.2e}")

        off, _ = DeepseekV41Reference(args.model, kv_qdq=False).forward(ids)
        rel = float(((off - full).norm(dim=1) / full.norm(dim=1)).median())
        check(rel > 1e-6, f"QDQ effective: median row rel. difference QDQ on/off = {rel:.2e}")

        for L in cfg.index_sources:
            sel = trace[f"layer{L}.index_selected"]
            pruned = int((sel.sum(1) < ((torch.arange(sel.shape[0]) + 1) // cfg.ratios[L])).sum())
            check(pruned > 0, f"index source {L}: {pruned} queries select fewer than their visible entries")
        if cfg.cand_source >= 0:
            users = [L for L in cfg.index_sources if L > cfg.cand_source]
            changed = 0
            for L in users:
                score = trace[f"layer{L}.index_score"]
                # queries whose candidate mask excluded a visible entry (its score is -inf)
                visible_n = (torch.arange(score.shape[0]) + 1) // cfg.ratios[L]
                changed += int((torch.isfinite(score).sum(1) < visible_n).sum())
            check(changed > 0, f"candidate restriction active in users {users}: {changed} query rows restricted")
        for L in cfg.engram_layers:
            g = trace[f"layer{L}.engram_gate"]
            check(float(g.min()) > 0.01 and float(g.max()) < 0.99 and float(g.std()) > 0.05,
                  f"Engram layer {L}: gates in [{float(g.min()):.3f}, {float(g.max()):.3f}], std {float(g.std()):.3f}")

        if cfg.n_mtp:
            n = min(args.prefix, 40)
            dl_full, _, _ = m.dspark({L: t[:n + 1] for L, t in taps.items()}, ids[:n + 1])
            _, taps_p = pre.forward(ids[:n + 1])
            dl_part, _, _ = pre.dspark(taps_p, ids[:n + 1])
            dd = float((dl_full[:, 0] - dl_part[:, 0]).abs().max())
            check(dd < 1e-9, f"DSpark draft 0 of a prefix with prefix-only taps: max diff {dd:.2e}")

        off = DeepseekV41Reference(args.model, numerics="reference")
        ref, _ = off.forward(ids)
        sites = sorted({re.sub(r"\.\d+\.", ".N.", s) for s in off._quantized_sites})
        official = sorted(f"layers.N.{s}" for s in (
            "attn.wq_a", "attn.wq_b", "attn.wkv", "attn.wo_b", "attn.indexer.wq_b", "ffn.experts.N.w1",
            "ffn.experts.N.w2", "ffn.experts.N.w3", "ffn.shared_experts.w1", "ffn.shared_experts.w2",
            "ffn.shared_experts.w3") + (("engram.wkv",) if cfg.engram_layers else ()))
        check(sites == official, f"reference numerics quantize the official sites: {sites}")
        rel = float(((ref - full).norm(dim=1) / full.norm(dim=1)).median())
        check(bool(torch.isfinite(ref).all()) and rel > 1e-3,
              f"reference numerics: median row rel. difference from plain = {rel:.2e}")

    print("all properties hold" if not failures else f"{len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
