#!/usr/bin/env bash
# The main job, from a fresh machine: installs what is missing, builds, and starts the server on the
# embedded default (a small generated DeepSeek-V4 model with the V4 tokenizer). Extra arguments go to
# `dsinfer serve`.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
scripts/setup.sh
scripts/build.sh release dsinfer
scripts/tokenizers.sh
exec build/release/src/cli/dsinfer serve "$@"
