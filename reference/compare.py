#!/usr/bin/python3
"""Compares two logit matrices [T, vocab] (A = candidate, B = reference):

  /usr/bin/python3 reference/compare.py A.npy B.npy [--max-median-rel 1e-4] [--min-argmax 0.99] [--label NAME]

Prints the per-row relative error ||a-b||/||b|| (median, max, worst row), the argmax agreement, and for
every argmax flip its position, both argmaxes, the top-2 margin in each matrix, and how far each matrix
places the other's choice below its own. Exits 1 when a given threshold fails, 2 on unusable input.
"""
import argparse
import sys

import numpy as np


def top2(row):
    i2 = np.argpartition(row, -2)[-2:]
    i2 = i2[np.argsort(-row[i2], kind="stable")]
    return int(i2[0]), float(row[i2[0]] - row[i2[1]])


# Rows converted to float64 at a time: a whole [T, 129280] pair in float64 plus its difference is over a
# GiB, and on the test VMs the page faults of that much fresh memory cost more than the arithmetic. Every
# statistic is per row, so the blocks give the same bits as whole matrices would.
ROW_BLOCK = 16


def compare(a, b):
    """Returns a dict of statistics; a and b are float arrays of equal 2-D shape."""
    rows = a.shape[0]
    num, den = np.empty(rows), np.empty(rows)
    am, bm = np.empty(rows, dtype=np.int64), np.empty(rows, dtype=np.int64)
    finite = True
    flips = []
    for r0 in range(0, rows, ROW_BLOCK):
        a64, b64 = a[r0:r0 + ROW_BLOCK].astype(np.float64), b[r0:r0 + ROW_BLOCK].astype(np.float64)
        r1 = r0 + a64.shape[0]
        num[r0:r1] = np.linalg.norm(a64 - b64, axis=1)
        den[r0:r1] = np.linalg.norm(b64, axis=1)
        am[r0:r1], bm[r0:r1] = a64.argmax(axis=1), b64.argmax(axis=1)
        finite = finite and bool(np.isfinite(a64).all() and np.isfinite(b64).all())
        for q in np.nonzero(am[r0:r1] != bm[r0:r1])[0]:
            ia, ma = top2(a64[q])
            ib, mb = top2(b64[q])
            flips.append({
                "pos": int(r0 + q), "argmax_a": ia, "argmax_b": ib, "margin_a": ma, "margin_b": mb,
                "a_gap": float(a64[q, ia] - a64[q, ib]), "b_gap": float(b64[q, ib] - b64[q, ia]),
            })
    rel = num / np.maximum(den, np.finfo(np.float64).tiny)
    return {
        "rows": rows, "median_rel": float(np.median(rel)), "max_rel": float(rel.max()),
        "worst_row": int(rel.argmax()), "argmax_agree": float((am == bm).mean()), "flips": flips,
        "finite": finite, "rel": rel,
    }


def first_row_above(rel, tol):
    """First row whose relative error exceeds tol (None when none does): where a divergence starts."""
    over = np.nonzero(rel > tol)[0]
    return int(over[0]) if len(over) else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="candidate logits .npy")
    ap.add_argument("b", help="reference logits .npy (the norm in the relative error is B's)")
    ap.add_argument("--max-median-rel", type=float, help="fail when the median relative error exceeds this")
    ap.add_argument("--max-rel", type=float, help="fail when the worst row's relative error exceeds this")
    ap.add_argument("--min-argmax", type=float, help="fail when the argmax agreement fraction is below this")
    ap.add_argument("--prefix-rows", type=int, default=0,
                    help="with --prefix-max-rel: the first N rows must each be within that relative error")
    ap.add_argument("--prefix-max-rel", type=float, help="bound for every one of the first --prefix-rows rows")
    ap.add_argument("--label", default="", help="name printed with the summary")
    ap.add_argument("--max-flips-shown", type=int, default=20, help="print at most this many flips")
    args = ap.parse_args()

    try:
        a, b = np.load(args.a), np.load(args.b)
    except (OSError, ValueError) as e:
        print(f"compare: cannot read input: {e}", file=sys.stderr)
        return 2
    if a.ndim != 2 or a.shape != b.shape:
        print(f"compare: shapes differ or are not 2-D: {args.a} {a.shape} vs {args.b} {b.shape}", file=sys.stderr)
        return 2
    if a.shape[0] == 0:
        print("compare: no rows", file=sys.stderr)
        return 2
    s = compare(a, b)
    tag = f"[{args.label}] " if args.label else ""
    print(f"{tag}rows {s['rows']}  rel err median {s['median_rel']:.3e}  max {s['max_rel']:.3e} "
          f"(row {s['worst_row']})  argmax agree {100 * s['argmax_agree']:.2f}% ({len(s['flips'])} flips)")
    for f in s["flips"][:args.max_flips_shown]:
        print(f"{tag}  flip at pos {f['pos']}: A argmax {f['argmax_a']} (top-2 margin {f['margin_a']:.3e}, "
              f"B's choice {f['a_gap']:.3e} below), B argmax {f['argmax_b']} (top-2 margin {f['margin_b']:.3e}, "
              f"A's choice {f['b_gap']:.3e} below)")
    onset = first_row_above(s["rel"], 1e-4)
    print(f"{tag}first row above 1e-4: {onset if onset is not None else 'none'}")
    if len(s["flips"]) > args.max_flips_shown:
        print(f"{tag}  ... {len(s['flips']) - args.max_flips_shown} more flips")
    failed = []
    if not s["finite"]:
        failed.append("non-finite values")
    if args.max_median_rel is not None and not s["median_rel"] <= args.max_median_rel:
        failed.append(f"median rel err {s['median_rel']:.3e} > {args.max_median_rel:g}")
    if args.max_rel is not None and not s["max_rel"] <= args.max_rel:
        failed.append(f"max rel err {s['max_rel']:.3e} > {args.max_rel:g}")
    if args.prefix_max_rel is not None and args.prefix_rows > 0:
        worst = float(s["rel"][:args.prefix_rows].max())
        if not worst <= args.prefix_max_rel:
            bad_row = first_row_above(s["rel"][:args.prefix_rows], args.prefix_max_rel)
            failed.append(f"row {bad_row} of the first {args.prefix_rows} has rel err "
                          f"{s['rel'][bad_row]:.3e} > {args.prefix_max_rel:g}")
    if args.min_argmax is not None and not s["argmax_agree"] >= args.min_argmax:
        failed.append(f"argmax agreement {s['argmax_agree']:.4f} < {args.min_argmax:g}")
    if failed:
        print(f"{tag}FAIL: " + "; ".join(failed))
        return 1
    print(f"{tag}PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
