#!/usr/bin/env bash
# Configures and builds one preset (default: release). Usage: scripts/build.sh [release|asan|tsan|fuzz] [targets...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
preset="${1:-release}"
shift || true
cd "$here"
# Always configure: cheap, and it picks up parts added since the last run.
cmake --preset "$preset" >/dev/null
if [ $# -gt 0 ]; then
  cmake --build --preset "$preset" --target "$@"
else
  cmake --build --preset "$preset"
fi
