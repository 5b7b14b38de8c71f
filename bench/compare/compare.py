#!/usr/bin/env python3
"""dsinfer next to llama.cpp on the same checkpoint and machine: one table of ratios.

Runs llama.cpp's own benchmarks (llama-bench: prefill pp and decode tg; llama-batched-bench: decode
with 1, 4, 16 parallel sequences) and dsinfer's (`dsinfer bench`, `dsinfer bench-serve`) interleaved,
REPEATS rounds of A then B, so that a change in the machine's load hits both sides alike; each number
is the median over the rounds, and each ratio is dsinfer / llama.cpp of those medians. Peak RSS is each
process's own (wait4's ru_maxrss). It builds and downloads nothing (README.md in this folder).

Environment:
  LLAMA_CPP_BUILD  llama.cpp build directory holding bin/llama-bench and bin/llama-batched-bench (required)
  LLAMA_GGUF       the GGUF converted from the same checkpoint by llama.cpp's converter (required)
  DSINFER_MODEL    the checkpoint directory (safetensors + config.json) (required)
  DSINFER_BIN      the dsinfer executable (default: build/release/src/cli/dsinfer of this repository)
  THREADS          threads for both (default: all cores)
  REPEATS          rounds (default: 3)
  PROMPT           prefill length (default: 512); DECODE decoded tokens (default: 64)
  BATCH_PROMPT     prompt per sequence of the batched runs (default: 128); BATCH_DECODE (default: 64)
  PARALLEL         comma list of concurrencies (default: 1,4,16)
  NUMERICS         dsinfer's --numerics (exact, reference, fast; default: dsinfer's own default)
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def env(name, default=None, required=False):
    v = os.environ.get(name, default)
    if required and not v:
        sys.exit(f"compare: set {name} (see {os.path.join(HERE, 'README.md')})")
    return v


def run(cmd):
    """Runs cmd; returns (stdout + stderr text, peak RSS in bytes). Fails on a non-zero exit."""
    with tempfile.TemporaryFile(mode="w+") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if p.returncode != 0:
        sys.exit(f"compare: {' '.join(cmd)} exited with {p.returncode}:\n{text[-3000:]}")
    return text, usage.ru_maxrss * 1024


def table_rows(text):
    """The numeric rows of markdown tables in text, as lists of cells."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append(cells)
    return rows


def parse_llama_bench(text):
    """llama-bench -o md: one table row per test; the test cell is "pp512"/"tg64" and the last cell is
    "t/s" as "mean ± sd". Returns {"prefill": t/s, "decode": t/s}, or None when either row is missing."""
    res = {}
    for cells in table_rows(text):
        test = next((c for c in cells if re.fullmatch(r"(pp|tg)\d+", c)), None)
        if test is None:
            continue
        res["prefill" if test.startswith("pp") else "decode"] = float(cells[-1].split("±")[0])
    return res if set(res) == {"prefill", "decode"} else None


def llama_bench(build, gguf, threads, prompt, decode):
    text, rss = run([os.path.join(build, "bin", "llama-bench"), "-m", gguf, "-t", str(threads), "-p", str(prompt),
                     "-n", str(decode), "-r", "1", "-o", "md"])
    res = parse_llama_bench(text)
    if res is None:
        sys.exit(f"compare: no pp/tg rows in llama-bench output:\n{text[-3000:]}")
    return res, rss


def parse_llama_batched(text):
    """llama-batched-bench's table: PP TG B N_KV T_PP S_PP T_TG S_TG T S. Returns {B: S_TG}, the decode
    speed over all B sequences."""
    res = {}
    for cells in table_rows(text):
        if len(cells) >= 8 and cells[2].isdigit():
            res[int(cells[2])] = float(cells[7])
    return res


def llama_batched(build, gguf, threads, prompt, decode, parallel):
    ctx = max(parallel) * (prompt + decode) + 256
    text, rss = run([os.path.join(build, "bin", "llama-batched-bench"), "-m", gguf, "-t", str(threads), "-c", str(ctx),
                     "-b", "2048", "-ub", "512", "-npp", str(prompt), "-ntg", str(decode), "-npl",
                     ",".join(map(str, parallel))])
    res = parse_llama_batched(text)
    missing = [b for b in parallel if b not in res]
    if missing:
        sys.exit(f"compare: llama-batched-bench printed no row for B={missing}:\n{text[-3000:]}")
    return res, rss


def parse_dsinfer_bench(text):
    """`dsinfer bench`: its "prefill: ... = X tok/s", "decode: ..., X tok/s" and "loaded in X s" lines.
    Returns {"prefill", "decode", "load_s"} (load_s NaN when absent), or None without prefill/decode."""
    pre = re.search(r"^prefill: .*?= ([0-9.]+) tok/s", text, re.M)
    dec = re.search(r"^decode: .*?, ([0-9.]+) tok/s", text, re.M)
    load = re.search(r"loaded in ([0-9.]+) s", text)
    if not (pre and dec):
        return None
    return {"prefill": float(pre.group(1)), "decode": float(dec.group(1)),
            "load_s": float(load.group(1)) if load else float("nan")}


def parse_dsinfer_batched(text):
    """`dsinfer bench-serve` decode table, after its "decode (" title and column line: concurrency,
    per-request tok/s, total tok/s, ... Returns {concurrency: total tok/s}."""
    res = {}
    if "\ndecode (" not in "\n" + text:
        return res
    section = ("\n" + text).split("\ndecode (", 1)[1]
    for line in section.splitlines()[2:]:
        cells = line.split()
        if len(cells) < 3 or not cells[0].isdigit():
            break
        res[int(cells[0])] = float(cells[2])
    return res


def numerics_flags(numerics):
    return ["--numerics", numerics] if numerics else []


def dsinfer_bench(binary, model, threads, prompt, decode, numerics):
    # A small bandwidth probe: its buffer would count in the peak RSS, and its result is not compared.
    text, rss = run([binary, "bench", "--model", model, "--threads", str(threads), "--prompt-len", str(prompt),
                     "--decode-tokens", str(decode), "--bandwidth-mib", "16"] + numerics_flags(numerics))
    res = parse_dsinfer_bench(text)
    if res is None:
        sys.exit(f"compare: unexpected dsinfer bench output:\n{text[-3000:]}")
    return res, rss


def dsinfer_batched(binary, model, threads, prompt, decode, parallel, numerics):
    with tempfile.TemporaryDirectory() as out:
        text, rss = run([binary, "bench-serve", "--model", model, "--threads", str(threads), "--out", out,
                         "--skip-prefill", "--skip-ttft", "--skip-overlap", "--decode-prompt", str(prompt),
                         "--decode-tokens", str(decode), "--concurrency", ",".join(map(str, parallel))]
                        + numerics_flags(numerics))
    res = parse_dsinfer_batched(text)
    missing = [b for b in parallel if b not in res]
    if missing:
        sys.exit(f"compare: dsinfer bench-serve printed no decode row for {missing}:\n{text[-3000:]}")
    return res, rss


def print_table(samples, parallel, out, title):
    metrics = []
    for (metric, _side) in samples:
        if metric not in metrics:
            metrics.append(metric)
    print(title, file=out)
    print(f"{'':32} {'llama.cpp':>12} {'dsinfer':>12} {'dsinfer/llama':>14}   llama.cpp rounds | dsinfer rounds",
          file=out)
    for metric in metrics:
        ll = samples.get((metric, "llama"))
        ds = samples.get((metric, "dsinfer"))
        lm = f"{statistics.median(ll):12.2f}" if ll else f"{'-':>12}"
        dm = f"{statistics.median(ds):12.2f}" if ds else f"{'-':>12}"
        ratio = f"{statistics.median(ds) / statistics.median(ll):.2f}x" if ll and ds and statistics.median(ll) > 0 else "-"
        rounds = " | ".join(" ".join(f"{v:.2f}" for v in (vals or [])) for vals in (ll, ds))
        print(f"{metric:32} {lm} {dm} {ratio:>14}   {rounds}", file=out)
    one = f"batched decode x{parallel[0]} tok/s"
    for b in parallel[1:]:
        key = f"batched decode x{b} tok/s"
        for side, name in (("llama", "llama.cpp"), ("dsinfer", "dsinfer")):
            if (key, side) in samples and (one, side) in samples:
                s = statistics.median(samples[(key, side)]) / statistics.median(samples[(one, side)])
                print(f"{name} x{b} / x{parallel[0]}: {s:.2f}", file=out)
    out.flush()


def main():
    build = env("LLAMA_CPP_BUILD", required=True)
    gguf = env("LLAMA_GGUF", required=True)
    model = env("DSINFER_MODEL", required=True)
    binary = env("DSINFER_BIN", os.path.join(REPO, "build", "release", "src", "cli", "dsinfer"))
    threads = int(env("THREADS", str(os.cpu_count())))
    repeats = int(env("REPEATS", "3"))
    prompt, decode = int(env("PROMPT", "512")), int(env("DECODE", "64"))
    bprompt, bdecode = int(env("BATCH_PROMPT", "128")), int(env("BATCH_DECODE", "64"))
    parallel = [int(x) for x in env("PARALLEL", "1,4,16").split(",")]
    numerics = env("NUMERICS", "")
    for path in (os.path.join(build, "bin", "llama-bench"), os.path.join(build, "bin", "llama-batched-bench"), binary):
        if not os.access(path, os.X_OK):
            sys.exit(f"compare: {path} is not an executable")

    samples = {}  # (metric, side) -> [values]

    def add(metric, side, value):
        samples.setdefault((metric, side), []).append(value)

    for r in range(repeats):
        print(f"round {r + 1}/{repeats} (load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
        # Alternate which side goes first, so neither always runs on a machine the other just warmed.
        order = ["llama", "dsinfer"] if r % 2 == 0 else ["dsinfer", "llama"]
        for side in order:
            # The load the machine had as each side started: numbers only mean something next to it.
            add("machine load (1-min avg)", side, os.getloadavg()[0])
            if side == "llama":
                single, rss1 = llama_bench(build, gguf, threads, prompt, decode)
                batched, rss2 = llama_batched(build, gguf, threads, bprompt, bdecode, parallel)
            else:
                single, rss1 = dsinfer_bench(binary, model, threads, prompt, decode, numerics)
                batched, rss2 = dsinfer_batched(binary, model, threads, bprompt, bdecode, parallel, numerics)
                add("load s (dsinfer)", side, single["load_s"])
            add(f"prefill pp{prompt} tok/s", side, single["prefill"])
            add(f"decode tg{decode} tok/s", side, single["decode"])
            for b in parallel:
                add(f"batched decode x{b} tok/s", side, batched[b])
            add("peak RSS GiB (single run)", side, rss1 / 2**30)
            add("peak RSS GiB (batched run)", side, rss2 / 2**30)
        # So far, on stderr: a run cut short still leaves its numbers.
        print_table(samples, parallel, sys.stderr, f"after round {r + 1}:")

    print_table(samples, parallel, sys.stdout,
                f"\n{threads} threads, {repeats} interleaved rounds (medians; every round's value in the last "
                f"columns), load now {os.getloadavg()[0]:.2f}, dsinfer numerics {numerics or 'default'}")


if __name__ == "__main__":
    main()
