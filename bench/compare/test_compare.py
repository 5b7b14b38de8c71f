"""Checks of compare.py's output parsers on output of the four benchmarks it runs (dsinfer's: real runs).

Run: /usr/bin/python3 -m unittest discover -s bench/compare -p 'test_*.py'
"""
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compare  # noqa: E402

# `dsinfer bench --model M --threads 2 --prompt-len 64 --decode-tokens 8 --bandwidth-mib 16` (busy machine).
DSINFER_BENCH = """\
model /tmp/perf2_medium: exact, 2 threads, loaded in 24.7 s
memory read bandwidth: 4925.8 GB/s with 2 threads, 6295.4 GB/s with 1 (buffer 16 MiB)
fp32 FMA peak (AVX3, 16 lanes): 72.6 GFLOP/s with 2 threads, 41.8 GFLOP/s with 1
weights read per decoded token: 562.3 MB (attention 150.0, compressors+indexer 49.9, shared experts 20.4, \
routed experts 65.2, router 1.7, mHC 10.3, head 264.8, embedding row 0.002)
prefill: 64 tokens in 1.919 s = 33.4 tok/s (products 30.4 GFLOP/s = 42% of the FMA peak)
decode: 8 tokens after 68, 6.90 tok/s (step median 141.33 ms, min 125.32 ms, max 166.89 ms); roofline 8760.0 \
tok/s at 4925.8 GB/s; 0% of the roofline
"""

# `dsinfer bench-serve ... --skip-prefill --skip-ttft --skip-overlap --decode-prompt 32 --decode-tokens 8
# --concurrency 1,4`.
DSINFER_SERVE = """\
bench-serve: loading /tmp/perf2_medium
dsinfer bench-serve: /tmp/perf2_medium, 2 cores

decode (prompt 32, 8 tokens each; tok/cpu-s = tokens per second of process CPU time, which a busy machine \
does not distort)
 concurrency  per-request tok/s  total tok/s     vs 1    tok/cpu-s     vs 1     fwd ms   gap ms
           1               6.81         6.81    1.00x         7.97    1.00x      373.3     0.03
           4               2.87        11.49    1.69x        13.40    1.68x      879.3     0.03

CSV and plots in bso
"""


# `llama-bench -m medium.gguf -t 2 -p 512 -n 64 -r 1 -o md` (real rows; "t/s" last as "mean ± sd").
LLAMA_BENCH = """\
| model                          |       size |     params | backend    | threads |            test |                  t/s |
| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |
| deepseek4 ?B MXFP4 MoE         |   1.38 GiB |     1.78 B | CPU        |       2 |           pp512 |         51.85 ± 0.00 |
| deepseek4 ?B MXFP4 MoE         |   1.38 GiB |     1.78 B | CPU        |       2 |            tg64 |          3.92 ± 0.00 |

build: 571d0d5 (1)
"""

# llama-batched-bench (its row format: "|%6d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |").
LLAMA_BATCHED = """\
main: n_kv_max = 3328, n_batch = 2048, n_ubatch = 512, flash_attn = -1, is_pp_shared = 0, n_gpu_layers = -1

|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|
|   128 |     64 |    1 |    192 |    1.500 |    85.33 |    4.000 |    16.00 |    5.500 |    34.91 |
|   128 |     64 |    4 |    768 |    6.000 |    85.33 |    8.000 |    32.00 |   14.000 |    54.86 |
|   128 |     64 |   16 |   3072 |   24.000 |    85.33 |   20.480 |    50.00 |   44.480 |    69.06 |
"""


class LlamaParsers(unittest.TestCase):
    def test_bench_reads_pp_and_tg(self):
        self.assertEqual(compare.parse_llama_bench(LLAMA_BENCH), {"prefill": 51.85, "decode": 3.92})

    def test_bench_without_tg_row_is_rejected(self):
        text = "\n".join(line for line in LLAMA_BENCH.splitlines() if "tg64" not in line)
        self.assertIsNone(compare.parse_llama_bench(text))

    def test_batched_reads_decode_speed_over_all_sequences(self):
        self.assertEqual(compare.parse_llama_batched(LLAMA_BATCHED), {1: 16.0, 4: 32.0, 16: 50.0})


class DsinferParsers(unittest.TestCase):
    def test_bench_reads_prefill_decode_and_load(self):
        res = compare.parse_dsinfer_bench(DSINFER_BENCH)
        self.assertEqual(res, {"prefill": 33.4, "decode": 6.90, "load_s": 24.7})

    def test_bench_reads_the_timed_prefill_not_the_cold_one(self):
        # Since the warm-up prefill of the full length, the line also reports the cold (first) prefill.
        line = ("prefill: 64 tokens in 1.919 s = 33.4 tok/s (median of 3 rounds: 31, 33, 35 tok/s; products 30.4 "
                "GFLOP/s = 42% of the FMA peak); the first, cold prefill (workspaces growing) 21.7 tok/s")
        text = "\n".join(line if l.startswith("prefill:") else l for l in DSINFER_BENCH.splitlines())
        self.assertEqual(compare.parse_dsinfer_bench(text)["prefill"], 33.4)

    def test_bench_without_decode_line_is_rejected(self):
        text = "\n".join(line for line in DSINFER_BENCH.splitlines() if not line.startswith("decode:"))
        self.assertIsNone(compare.parse_dsinfer_bench(text))

    def test_bench_without_load_line_gives_nan_load(self):
        text = "\n".join(line for line in DSINFER_BENCH.splitlines() if "loaded in" not in line)
        self.assertTrue(math.isnan(compare.parse_dsinfer_bench(text)["load_s"]))

    def test_serve_reads_total_tokens_per_concurrency(self):
        self.assertEqual(compare.parse_dsinfer_batched(DSINFER_SERVE), {1: 6.81, 4: 11.49})

    def test_serve_without_decode_table_gives_nothing(self):
        self.assertEqual(compare.parse_dsinfer_batched("bench-serve: loading M\n\nCSV and plots in x\n"), {})


if __name__ == "__main__":
    unittest.main()
