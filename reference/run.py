#!/usr/bin/python3
"""Reference logits for a prompt, same contract as `dsinfer logits`:

  /usr/bin/python3 reference/run.py --model DIR --prompt-ids 0,5,... --out logits.npy [--mtp] [--no-kv-qdq]
      [--dtype float64|float32] [--numerics plain|reference] [--out-mtp mtp.npy]

writes float32 .npy logits [T, vocab], or with --mtp the MTP logits [T-1, vocab] (row p predicts token
p+2 from the state at p and token p+1). --out-mtp writes the MTP logits as well, in the same run.

A DeepseekV41ForCausalLM checkpoint (config.json architectures[0]) runs model_v41.py (--numerics reference:
the official V4.1 code's activation FP8 QDQ in blocks of 32 and bf16 storage). Its draft head is DSpark
(plain numerics only): --out-dspark FILE.npz writes, for every p < T-1 (the round after p with anchor token
p+1), `logits0` [T-1, vocab] (draft 0, which depends on the anchor only), `drafts` [T-1, block] (greedy
chain) and `confidence` [T-1, block] (raw logits).
"""
import json
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from model_v4 import DeepseekV4Reference  # noqa: E402
from model_v41 import DeepseekV41Reference  # noqa: E402


def parse_ids(text):
    if text.startswith("@"):
        with open(text[1:]) as f:
            text = f.read()
    ids = []
    for i, part in enumerate(text.replace("\n", ",").split(",")):
        part = part.strip()
        if not part:
            continue
        try:
            ids.append(int(part))
        except ValueError:
            raise SystemExit(f"--prompt-ids: element {i} ({part!r}) is not an integer")
    if not ids:
        raise SystemExit("--prompt-ids: empty list")
    return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint directory (config.json + safetensors)")
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids, or @FILE holding them")
    ap.add_argument("--out", required=True, help="output .npy (float32)")
    ap.add_argument("--mtp", action="store_true", help="write the MTP logits [T-1, vocab] to --out instead")
    ap.add_argument("--out-mtp", help="also write the MTP logits [T-1, vocab] to this file")
    ap.add_argument("--no-kv-qdq", action="store_true", help="turn off the KV FP8 and indexer FP4 QDQ")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--numerics", choices=["plain", "reference"], default="plain",
                    help="'reference': activation FP8 QDQ before FP8/FP4 GEMMs (blocks of 128 on V4, 32 on V4.1) and "
                         "bf16 storage, as the official code (statistical comparisons only)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's default)")
    ap.add_argument("--out-dspark", help="V4.1: also write the DSpark draft head's outputs (.npz, see above)")
    args = ap.parse_args()

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    ids = parse_ids(args.prompt_ids)
    t0 = time.time()
    with open(os.path.join(args.model, "config.json")) as f:
        arch = (json.load(f).get("architectures") or [""])[0]
    if arch == "DeepseekV41ForCausalLM":
        if args.mtp or args.out_mtp:
            raise SystemExit("V4.1: --mtp/--out-mtp are not supported (use --out-dspark)")
        if args.out_dspark and args.numerics != "plain":
            raise SystemExit("V4.1: --out-dspark is computed in plain numerics only")
        model = DeepseekV41Reference(args.model, dtype=getattr(torch, args.dtype), kv_qdq=not args.no_kv_qdq,
                                     numerics=args.numerics)
        with torch.no_grad():
            logits, taps = model.forward(ids)
            np.save(args.out, logits.to(torch.float32).numpy())
            if args.out_dspark:
                dl, drafts, conf = model.dspark(taps, ids)
                np.savez(args.out_dspark, logits0=dl[:, 0].to(torch.float32).numpy(), drafts=drafts.numpy(),
                         confidence=conf.to(torch.float32).numpy())
        print(f"reference V4.1: {len(ids)} tokens, {args.dtype}, numerics={args.numerics}, "
              f"kv_qdq={not args.no_kv_qdq}: "
              f"{time.time() - t0:.1f} s", file=sys.stderr)
        return
    if args.out_dspark:
        raise SystemExit("--out-dspark is for V4.1 checkpoints")
    model = DeepseekV4Reference(args.model, dtype=getattr(torch, args.dtype), kv_qdq=not args.no_kv_qdq,
                                numerics=args.numerics)
    with torch.no_grad():
        logits, state = model.forward(ids)
        mtp = model.mtp(state, ids) if (args.mtp or args.out_mtp) else None
    main_out = mtp if args.mtp else logits
    np.save(args.out, main_out.to(torch.float32).numpy())
    if args.out_mtp:
        np.save(args.out_mtp, mtp.to(torch.float32).numpy())
    print(f"reference: {len(ids)} tokens, {args.dtype}, numerics={args.numerics}, "
          f"kv_qdq={not args.no_kv_qdq}: {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
