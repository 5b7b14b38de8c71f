#!/usr/bin/python3
"""Golden tests: the C++ forward pass (`dsinfer logits`) against the independent PyTorch reference
(reference/run.py) on synthetic checkpoints made by `dsinfer mkmodel`.

  golden.py setup    --dsinfer BIN --config CFG --seed S --tokens N --work DIR [--no-kv-qdq]
      mkmodel into DIR/model, prompt ids into DIR/ids.txt, reference logits DIR/ref_noqdq.npy (KV/indexer
      QDQ off) and, unless --no-kv-qdq, DIR/ref.npy (QDQ on), each with MTP logits *_mtp.npy (for a
      DeepseekV41ForCausalLM config: reference/model_v41.py, *_mtp.npy = DSpark draft-0 logits, *_conf.npy =
      the confidence logits [T-1, block] of the same greedy rounds, with QDQ off only).
  golden.py compare  --dsinfer BIN --work DIR --name NAME [--mtp | --with-mtp] [--no-kv-qdq] [--chunk-size N]
                     [--double-accumulation] [--with-confidence]
                     [--rollback K] [--max-median-rel X] [--max-rel X] [--min-argmax X]
                     [--prefix-rows N --prefix-max-rel X]
      runs `dsinfer logits` with those flags and compares with the reference of the setup; --with-mtp
      (V4.1) also compares the MTP logits of the same run (`--mtp-out`), as NAME_mtp; --with-confidence (V4.1,
      with --mtp or --with-mtp) the DSpark confidence logits (`--confidence-out`), as NAME_conf.
  golden.py teacher --dsinfer BIN --work DIR --name NAME [--mtp] [--chunk-size N] [--rollback K] [thresholds]
      KV / indexer QDQ on, teacher-forced: `dsinfer logits --dump-kv` writes every QDQ'd vector it stored,
      the reference (float64, in process) uses them instead of its own QDQ results after checking each is
      a correct rounding of its own values, and the logits are compared (strict bounds by default). V4.1 with
      --mtp: the DSpark rings and block KV (PREFIX.ring<s>.npy, PREFIX.block<s>.npy) are teacher-forced too,
      and the draft-0 logits and the confidence logits (as NAME_conf) are compared.
  golden.py short    --dsinfer BIN --work DIR [--lengths 1,2,3,...]
      prompts shorter than a compression group / window (fresh compressor state): one-pass and MTP.
  golden.py fidelity --dsinfer BIN --work DIR [--no-kv-qdq] [--model DIR --tokens N --seed S]
      the fidelity of `dsinfer logits --numerics fast`: its distance to the reference's plain run
      (reference/run.py --numerics plain, float32) next to the official numerics' own distance (the
      reference with its activation quantization, --numerics reference, against the same plain run):
      median row relative error, mean KL(plain || candidate), top-1 agreement. Fails unless fast is no
      further on each of the three: the bound is the official numerics' distance, measured in the run.
      Uses the setup's model and prompt, or --model with a prompt of --tokens ids from --seed (MEDIUM). V4 and
      V4.1 alike (run.py picks the model by architectures[0]; V4.1's official numerics: blocks of 32).
  golden.py selftest --dsinfer BIN --config CFG --seed S --work DIR
      the reference's own whole-model checks (reference/tests/model_props_check.py) on a mkmodel checkpoint.

Every step prints the commands it runs and the comparison summary (flips with their margins).
"""
import argparse
import os
import shlex
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
REFERENCE = os.path.join(ROOT, "reference")
PYTHON = "/usr/bin/python3"  # the Debian interpreter that has python3-torch

sys.path.insert(0, REFERENCE)
import compare as cmp  # noqa: E402


def shown(arg):
    """Long id lists are abbreviated in the printed command line."""
    if len(arg) > 120 and arg.count(",") > 10:
        return arg[:60] + f"...({arg.count(',') + 1} ids)"
    return arg


def run(cmd, what):
    print("$ " + " ".join(shlex.quote(shown(c)) for c in cmd), flush=True)
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [ln for ln in p.stdout.strip().splitlines() if "%" not in ln or "100%" in ln]  # drop progress bars
    if lines:
        print("\n".join("    " + line for line in lines[-200:]))
    print(f"    ({what}: {time.time() - t0:.1f} s, exit {p.returncode})", flush=True)
    if p.returncode != 0:
        raise SystemExit(f"golden: {what} failed with exit status {p.returncode}")


def prompt_ids(seed, tokens, vocab):
    """BOS, then tokens drawn from the seed over the whole vocabulary, with some repeats."""
    rng = np.random.default_rng(1000 + seed)
    ids = rng.integers(0, vocab, tokens)
    ids[0] = 0
    rep = rng.integers(1, tokens, max(1, tokens // 16))
    ids[rep] = ids[rep - 1]  # repeated neighbours (same hash routing, near-equal keys)
    return [int(x) for x in ids]


def ref_name(no_kv_qdq, mtp, conf=False):
    return "ref" + ("_noqdq" if no_kv_qdq else "") + ("_mtp" if mtp else "") + ("_conf" if conf else "") + ".npy"


def read_ids(work):
    with open(os.path.join(work, "ids.txt")) as f:
        return [int(x) for x in f.read().split(",")]


def mkmodel(args, model_dir):
    if not os.path.exists(args.dsinfer):
        raise SystemExit(f"golden: no dsinfer binary at {args.dsinfer}")
    run([args.dsinfer, "mkmodel", "--config", args.config, "--seed", str(args.seed), "--out", model_dir],
        "dsinfer mkmodel")


def cmd_setup(args):
    os.makedirs(args.work, exist_ok=True)
    model = os.path.join(args.work, "model")
    mkmodel(args, model)
    import json
    with open(os.path.join(model, "config.json")) as f:
        config = json.load(f)
    v41 = (config.get("architectures") or [""])[0] == "DeepseekV41ForCausalLM"
    vocab = (config.get("text_config") or config)["vocab_size"]
    ids = prompt_ids(args.seed, args.tokens, vocab)
    with open(os.path.join(args.work, "ids.txt"), "w") as f:
        f.write(",".join(map(str, ids)))
    import torch
    if v41:  # DeepSeek-V4.1: main logits, and as "_mtp" the DSpark draft-0 logits [T-1, vocab]
        from model_v41 import DeepseekV41Reference
        head = None
        for no_qdq in ([True] if args.no_kv_qdq else [False, True]):
            t0 = time.time()
            m = DeepseekV41Reference(model, kv_qdq=not no_qdq)
            m._head = head  # decoded once, shared by both variants
            with torch.no_grad():
                logits, taps = m.forward(ids)
                # The draft head with QDQ on free-running is compared by no test (the teacher-forced test
                # checks it, with its own reference run), and its [T-1, block, vocab] float64 logits cost
                # more than the forward pass: only the QDQ-off draft head is written.
                draft, _, conf = m.dspark(taps, ids) if no_qdq else (None, None, None)
            head = m._head
            np.save(os.path.join(args.work, ref_name(no_qdq, False)), logits.to(torch.float32).numpy())
            if draft is not None:
                np.save(os.path.join(args.work, ref_name(no_qdq, True)), draft[:, 0].to(torch.float32).numpy())
                np.save(os.path.join(args.work, ref_name(no_qdq, True, conf=True)), conf.to(torch.float32).numpy())
            print(f"reference V4.1 (float64, kv_qdq={not no_qdq}): logits {tuple(logits.shape)}"
                  + (f", DSpark draft 0 {tuple(draft[:, 0].shape)}" if draft is not None else "")
                  + f", {time.time() - t0:.1f} s", flush=True)
        print(f"golden setup done: {len(ids)} tokens in {args.work}")
        return
    from model_v4 import DeepseekV4Reference
    head = None
    for no_qdq in ([True] if args.no_kv_qdq else [False, True]):
        t0 = time.time()
        m = DeepseekV4Reference(model, kv_qdq=not no_qdq)
        m._head = head  # decoded once, shared by both variants
        with torch.no_grad():
            logits, state = m.forward(ids)
            mtp = m.mtp(state, ids)
        head = m._head
        np.save(os.path.join(args.work, ref_name(no_qdq, False)), logits.to(torch.float32).numpy())
        np.save(os.path.join(args.work, ref_name(no_qdq, True)), mtp.to(torch.float32).numpy())
        print(f"reference (float64, kv_qdq={not no_qdq}): logits {tuple(logits.shape)}, MTP {tuple(mtp.shape)}, "
              f"{time.time() - t0:.1f} s", flush=True)
    print(f"golden setup done: {len(ids)} tokens in {args.work}")


def report(a_path, b_path, label, th):
    a, b = np.load(a_path), np.load(b_path)
    if a.shape != b.shape:
        print(f"[{label}] FAIL: dsinfer wrote shape {a.shape}, the reference {b.shape}")
        return False
    s = cmp.compare(a, b)
    onset = cmp.first_row_above(s["rel"], 1e-4)
    print(f"[{label}] rows {s['rows']}  rel err median {s['median_rel']:.3e}  max {s['max_rel']:.3e} "
          f"(row {s['worst_row']})  argmax agree {100 * s['argmax_agree']:.2f}% ({len(s['flips'])} flips)  "
          f"first row above 1e-4: {onset if onset is not None else 'none'}")
    for f in s["flips"][:20]:
        print(f"[{label}]   flip at pos {f['pos']}: dsinfer argmax {f['argmax_a']} (top-2 margin {f['margin_a']:.3e}), "
              f"reference argmax {f['argmax_b']} (top-2 margin {f['margin_b']:.3e}); reference places dsinfer's "
              f"choice {f['b_gap']:.3e} below its own")
    if len(s["flips"]) > 20:
        print(f"[{label}]   ... {len(s['flips']) - 20} more flips")
    bad = []
    if not s["finite"]:
        bad.append("non-finite logits")
    if th.max_median_rel is not None and not s["median_rel"] <= th.max_median_rel:
        bad.append(f"median rel err {s['median_rel']:.3e} > {th.max_median_rel:g}")
    if th.max_rel is not None and not s["max_rel"] <= th.max_rel:
        bad.append(f"max rel err {s['max_rel']:.3e} > {th.max_rel:g}")
    if th.min_argmax is not None and not s["argmax_agree"] >= th.min_argmax:
        bad.append(f"argmax agreement {s['argmax_agree']:.4f} < {th.min_argmax:g}")
    if th.prefix_max_rel is not None and th.prefix_rows > 0:
        row = cmp.first_row_above(s["rel"][:th.prefix_rows], th.prefix_max_rel)
        if row is not None:
            bad.append(f"row {row} (of the first {th.prefix_rows}, which must all agree) has rel err "
                       f"{s['rel'][row]:.3e} > {th.prefix_max_rel:g}")
    print(f"[{label}] " + ("FAIL: " + "; ".join(bad) if bad else "PASS"), flush=True)
    return not bad


def report_confidence(a_path, b_path, label, th):
    """The DSpark confidence logits [T-1, block]: row p = c_0 .. c_{block-1} of the round after p. Held to the
    median / max row relative error bounds (no argmax: a row holds one scalar per draft, not a distribution);
    a draft chain that went another way than the reference's shows as a row far off."""
    a, b = np.load(a_path).astype(np.float64), np.load(b_path).astype(np.float64)
    if a.shape != b.shape:
        print(f"[{label}] FAIL: dsinfer wrote shape {a.shape}, the reference {b.shape}")
        return False
    rel = np.linalg.norm(a - b, axis=1) / np.maximum(np.linalg.norm(b, axis=1), np.finfo(np.float64).tiny)
    sig = np.abs(1 / (1 + np.exp(-a)) - 1 / (1 + np.exp(-b))).max()
    print(f"[{label}] rows {a.shape[0]} x {a.shape[1]} drafts  rel err median {np.median(rel):.3e}  max "
          f"{rel.max():.3e} (row {int(rel.argmax())})  max |sigmoid difference| {sig:.3e}  first row above 1e-4: "
          f"{cmp.first_row_above(rel, 1e-4)}")
    bad = []
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        bad.append("non-finite confidence logits")
    if th.max_median_rel is not None and not np.median(rel) <= th.max_median_rel:
        bad.append(f"median rel err {np.median(rel):.3e} > {th.max_median_rel:g}")
    if th.max_rel is not None and not rel.max() <= th.max_rel:
        bad.append(f"max rel err {rel.max():.3e} > {th.max_rel:g}")
    print(f"[{label}] " + ("FAIL: " + "; ".join(bad) if bad else "PASS"), flush=True)
    return not bad


def dsinfer_logits(args, model, ids, out, mtp=False, extra=()):
    cmd = [args.dsinfer, "logits", "--model", model, "--prompt-ids", ",".join(map(str, ids)), "--out", out]
    if mtp:
        cmd.append("--mtp")
    if getattr(args, "no_kv_qdq", False):
        cmd.append("--no-kv-qdq")
    if getattr(args, "chunk_size", None):
        cmd += ["--chunk-size", str(args.chunk_size)]
    if getattr(args, "rollback", None):
        cmd += ["--rollback", str(args.rollback)]
    if getattr(args, "double_accumulation", False):
        cmd.append("--double-accumulation")
    cmd += list(extra)
    run(cmd, "dsinfer logits")


def cmd_compare(args):
    # --with-mtp: one `dsinfer logits --mtp-out` run gives both the main and the MTP logits, each
    # compared with its reference (V4.1: the DSpark draft head; one forward pass instead of two).
    cases = [(args.name, args.mtp)] + ([(args.name + "_mtp", True)] if args.with_mtp else [])
    refs, outs = [], []
    for label, mtp in cases:
        ref = os.path.join(args.work, ref_name(args.no_kv_qdq, mtp))
        if not os.path.exists(ref):
            raise SystemExit(f"golden: no reference logits {ref} (did the setup test run? A V4.1 setup writes "
                             "the draft head's reference with QDQ off only)")
        out = os.path.join(args.work, f"dsinfer_{label}.npy")
        if os.path.exists(out):
            os.remove(out)
        refs.append(ref)
        outs.append(out)
    extra = ["--mtp-out", outs[1]] if args.with_mtp else []
    if args.with_confidence:
        if not (args.mtp or args.with_mtp):
            raise SystemExit("golden: --with-confidence needs --mtp or --with-mtp")
        conf_ref = os.path.join(args.work, ref_name(args.no_kv_qdq, True, conf=True))
        if not os.path.exists(conf_ref):
            raise SystemExit(f"golden: no reference confidence logits {conf_ref} (did the setup test run?)")
        conf_out = os.path.join(args.work, f"dsinfer_{args.name}_conf.npy")
        if os.path.exists(conf_out):
            os.remove(conf_out)
        extra += ["--confidence-out", conf_out]
    dsinfer_logits(args, os.path.join(args.work, "model"), read_ids(args.work), outs[0], args.mtp, extra)
    ok = [report(out, ref, label, args) for (label, _), out, ref in zip(cases, outs, refs)]
    if args.with_confidence:
        ok.append(report_confidence(conf_out, conf_ref, args.name + "_conf", args))
    return 0 if all(ok) else 1


def load_teacher(prefix, n_layers, mtp, rings=0):
    """The files of `dsinfer logits --dump-kv PREFIX` as the reference's teacher dict (V4.1 with the draft
    head: for each of the `rings` DSpark stages its ring PREFIX.ring<s>.npy and block KV PREFIX.block<s>.npy,
    sites ring<s> and block<s>)."""
    win = np.load(prefix + ".window.npy")
    T = win.shape[0] // n_layers
    teacher = {f"window{L}": win[L * T:(L + 1) * T] for L in range(n_layers)}
    for L in range(n_layers):
        for kind in ("comp", "key"):
            path = f"{prefix}.{kind}{L}.npy"
            if os.path.exists(path):
                teacher[f"{kind}{L}"] = np.load(path)
    if mtp and rings:
        for s in range(rings):
            for kind in ("ring", "block"):
                teacher[f"{kind}{s}"] = np.load(f"{prefix}.{kind}{s}.npy")
    elif mtp:
        teacher[f"window{n_layers}"] = np.load(prefix + ".mtp_window.npy")
    return teacher


def cmd_teacher(args):
    ids = read_ids(args.work)
    model = os.path.join(args.work, "model")
    prefix = os.path.join(args.work, f"teacher_{args.name}")
    out = prefix + ".npy"
    for old in [f for f in os.listdir(args.work) if f.startswith(f"teacher_{args.name}.")]:
        os.remove(os.path.join(args.work, old))
    import json
    with open(os.path.join(model, "config.json")) as f:
        v41 = (json.load(f).get("architectures") or [""])[0] == "DeepseekV41ForCausalLM"
    conf_out = prefix + "_conf.npy" if v41 and args.mtp else None
    dsinfer_logits(args, model, ids, out, args.mtp,
                   extra=["--dump-kv", prefix] + (["--confidence-out", conf_out] if conf_out else []))
    import torch
    t0 = time.time()
    if v41:
        from model_v41 import DeepseekV41Reference
        ref_model = DeepseekV41Reference(model, kv_qdq=True)
    else:
        from model_v4 import DeepseekV4Reference
        ref_model = DeepseekV4Reference(model, kv_qdq=True)
    ref_model.teacher = load_teacher(prefix, ref_model.cfg.n_layers, args.mtp, ref_model.cfg.n_mtp if v41 else 0)
    conf = None
    with torch.no_grad():
        logits, state = ref_model.forward(ids)
        if args.mtp and v41:  # state: the DSpark taps
            draft, _, conf = ref_model.dspark(state, ids)
            logits = draft[:, 0]
        elif args.mtp:
            logits = ref_model.mtp(state, ids)
    ref = prefix + "_ref.npy"
    np.save(ref, logits.to(torch.float32).numpy())
    print(f"reference (float64, teacher-forced on dsinfer's stored QDQ values): {time.time() - t0:.1f} s")
    unused = set(ref_model.teacher) - set(ref_model.teacher_stats)
    ok = not unused
    if unused:
        print(f"[{args.name}] FAIL: dumped values the reference never used: {sorted(unused)}")
    total = [0, 0, 0, 0]
    for site, st in ref_model.teacher_stats.items():
        total = [a + b for a, b in zip(total, st)]
        if st[2] or st[3]:
            ok = False
            print(f"[{args.name}] FAIL: {site}: {st[2]} of {st[0]} values are not a nearest rounding of the "
                  f"reference's pre-QDQ values, {st[3]} are off the FP8/FP4 grid")
    print(f"[{args.name}] teacher: {len(ref_model.teacher_stats)} sites, {total[0]} values, {total[1]} differ from "
          f"the reference's own QDQ (rounding-boundary cases), {total[2]} wrong, {total[3]} off grid")
    if total[1] > args.max_differ * total[0]:
        ok = False
        print(f"[{args.name}] FAIL: {total[1]} values differ from the reference's QDQ, more than "
              f"{args.max_differ:g} of them")
    ok &= report(out, ref, args.name, args)
    if conf is not None:
        conf_ref = prefix + "_conf_ref.npy"
        np.save(conf_ref, conf.to(torch.float32).numpy())
        ok &= report_confidence(conf_out, conf_ref, args.name + "_conf", args)
    return 0 if ok else 1


def cmd_short(args):
    ids = read_ids(args.work)
    model = os.path.join(args.work, "model")
    ok = True
    import torch
    from model_v4 import DeepseekV4Reference
    ref_model = DeepseekV4Reference(model, kv_qdq=not args.no_kv_qdq)
    print(f"reference in process: float64, kv_qdq={not args.no_kv_qdq}")
    tag = "_noqdq" if args.no_kv_qdq else ""
    for n in [int(x) for x in args.lengths.split(",")]:
        sub = ids[:n]
        ref = os.path.join(args.work, f"short{n}{tag}_ref.npy")
        refm = os.path.join(args.work, f"short{n}{tag}_ref_mtp.npy")
        with torch.no_grad():  # one in-process reference for all lengths (saves a start-up per length)
            logits, state = ref_model.forward(sub)
            np.save(ref, logits.to(torch.float32).numpy())
            if n >= 2:
                np.save(refm, ref_model.mtp(state, sub).to(torch.float32).numpy())
        out = os.path.join(args.work, f"short{n}{tag}_dsinfer.npy")
        dsinfer_logits(args, model, sub, out)
        ok &= report(out, ref, f"short{n}", args)
        if n >= 2:
            outm = os.path.join(args.work, f"short{n}{tag}_dsinfer_mtp.npy")
            dsinfer_logits(args, model, sub, outm, mtp=True)
            ok &= report(outm, refm, f"short{n}_mtp", args)
    return 0 if ok else 1


def fidelity_stats(a, b):
    """Median row relative error, mean KL(softmax(b) || softmax(a)) in nats, top-1 agreement; b the plain run."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    rel = np.linalg.norm(a64 - b64, axis=1) / np.maximum(np.linalg.norm(b64, axis=1), np.finfo(np.float64).tiny)

    def log_softmax(x):
        z = x - x.max(axis=1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))

    la, lb = log_softmax(a64), log_softmax(b64)
    kl = (np.exp(lb) * (lb - la)).sum(axis=1)
    return {"median_rel": float(np.median(rel)), "mean_kl": float(kl.mean()),
            "top1": float((a64.argmax(axis=1) == b64.argmax(axis=1)).mean())}


def cmd_fidelity(args):
    if args.model:
        os.makedirs(args.work, exist_ok=True)
        import json
        with open(os.path.join(args.model, "config.json")) as f:
            config = json.load(f)
        vocab = (config.get("text_config") or config)["vocab_size"]  # V4.1 nests it in text_config
        model, ids = args.model, prompt_ids(args.seed, args.tokens, vocab)
    else:
        model, ids = os.path.join(args.work, "model"), read_ids(args.work)
    tag = "_noqdq" if args.no_kv_qdq else ""
    qdq = ["--no-kv-qdq"] if args.no_kv_qdq else []
    ids_file = os.path.join(args.work, "fidelity_ids.txt")
    with open(ids_file, "w") as f:
        f.write(",".join(map(str, ids)))
    outs = {}
    for numerics in ("plain", "reference"):
        outs[numerics] = os.path.join(args.work, f"fidelity_ref_{numerics}{tag}.npy")
        run([PYTHON, os.path.join(REFERENCE, "run.py"), "--model", model, "--prompt-ids", "@" + ids_file,
             "--out", outs[numerics], "--dtype", "float32", "--numerics", numerics] + qdq,
            f"reference ({numerics} numerics, float32)")
    outs["fast"] = os.path.join(args.work, f"fidelity_dsinfer_fast{tag}.npy")
    run([args.dsinfer, "logits", "--model", model, "--prompt-ids", "@" + ids_file, "--out", outs["fast"],
         "--numerics", "fast"] + qdq, "dsinfer logits --numerics fast")
    plain = np.load(outs["plain"])
    fast, official = fidelity_stats(np.load(outs["fast"]), plain), fidelity_stats(np.load(outs["reference"]), plain)
    for label, st in (("dsinfer fast", fast), ("official (reference numerics)", official)):
        print(f"[fidelity] {label} vs reference plain fp32, {plain.shape[0]} rows: median row rel err "
              f"{st['median_rel']:.4f}  mean KL {st['mean_kl']:.4f}  top-1 {st['top1']:.4f}")
    bad = []
    if not np.isfinite(np.load(outs["fast"])).all():
        bad.append("non-finite fast logits")
    if not fast["median_rel"] <= official["median_rel"]:
        bad.append(f"median rel err {fast['median_rel']:.4f} > the official numerics' {official['median_rel']:.4f}")
    if not fast["mean_kl"] <= official["mean_kl"]:
        bad.append(f"mean KL {fast['mean_kl']:.4f} > the official numerics' {official['mean_kl']:.4f}")
    if not fast["top1"] >= official["top1"]:
        bad.append(f"top-1 agreement {fast['top1']:.4f} < the official numerics' {official['top1']:.4f}")
    print("[fidelity] " + ("FAIL: " + "; ".join(bad) if bad else "PASS"), flush=True)
    return 1 if bad else 0


def cmd_selftest(args):
    os.makedirs(args.work, exist_ok=True)
    model = os.path.join(args.work, "model")
    mkmodel(args, model)
    run([PYTHON, os.path.join(REFERENCE, "tests", "model_props_check.py"), model, "--seed", str(args.seed)],
        "reference model checks")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("setup", "compare", "teacher", "short", "fidelity", "selftest"):
        p = sub.add_parser(name)
        p.add_argument("--dsinfer", required=True)
        p.add_argument("--work", required=True)
        if name in ("setup", "selftest"):
            p.add_argument("--config", required=True)
            p.add_argument("--seed", type=int, required=True)
        if name == "setup":
            p.add_argument("--tokens", type=int, required=True)
        if name in ("setup", "compare", "short", "fidelity"):
            p.add_argument("--no-kv-qdq", action="store_true")
        if name == "fidelity":
            p.add_argument("--model", help="a checkpoint instead of the setup's (with --tokens and --seed)")
            p.add_argument("--tokens", type=int, default=96)
            p.add_argument("--seed", type=int, default=1)
        if name in ("compare", "teacher", "short"):
            p.add_argument("--max-median-rel", type=float, default=1e-4)
            p.add_argument("--max-rel", type=float)
            p.add_argument("--min-argmax", type=float, default=0.99)
            p.add_argument("--prefix-rows", type=int, default=0)
            p.add_argument("--prefix-max-rel", type=float)
        if name == "teacher":
            p.add_argument("--max-differ", type=float, default=5e-4,
                           help="largest share of stored values allowed to differ from the reference's QDQ")
        if name in ("compare", "teacher"):
            p.add_argument("--name", required=True)
            p.add_argument("--mtp", action="store_true")
            if name == "compare":
                p.add_argument("--with-mtp", action="store_true",
                               help="also compare the MTP logits, from the same dsinfer run (--mtp-out)")
                p.add_argument("--with-confidence", action="store_true",
                               help="V4.1: also compare the DSpark confidence logits, from the same run")
                p.add_argument("--double-accumulation", action="store_true",
                               help="V4.1: dsinfer's double-accumulation loops instead of the fp32 kernels")
            p.add_argument("--chunk-size", type=int)
            p.add_argument("--rollback", type=int)
        if name == "short":
            p.add_argument("--lengths", default="1,2,3,4,5,8,33")
    args = ap.parse_args()
    return {"setup": cmd_setup, "compare": cmd_compare, "teacher": cmd_teacher, "short": cmd_short,
            "fidelity": cmd_fidelity, "selftest": cmd_selftest}[args.cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
