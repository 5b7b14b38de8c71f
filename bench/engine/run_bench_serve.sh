#!/usr/bin/env bash
# The serving-engine curves on the MEDIUM config (model-v4.md §6.3): makes the checkpoint once outside
# the repository (it is ~1.5 GB), then runs `dsinfer bench-serve` and leaves the table, CSV files and
# PNG plots in $OUT. Numbers only: run it on a quiet machine.
#   bench/engine/run_bench_serve.sh [build-dir] [extra bench-serve flags...]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build/release}
shift || true
dsinfer=$build/src/cli/dsinfer
model=${DSINFER_MEDIUM_DIR:-/tmp/dsinfer-medium}
out=${OUT:-$here/build/bench-serve-medium}
if [ ! -f "$model/model.safetensors" ]; then
  "$dsinfer" mkmodel --config "$here/configs/medium.json" --seed 1 --out "$model"
fi
"$dsinfer" bench-serve --model "$model" --out "$out" "$@" | tee "$out.txt"
