#!/usr/bin/env bash
# Runs tests again and again until one fails, to catch tests whose outcome depends on thread timing
# (a test that fails one run in forty fails CI at random). Usage:
#   scripts/repeat_tests.sh [N] [extra ctest arguments]     (default: N = 100, the tests labelled unit)
# e.g. scripts/repeat_tests.sh 100 -R test_engine   or   scripts/repeat_tests.sh 20 -L model
# Runs on the release build (scripts/build.sh release first). Each test executable is repeated N times;
# the first failure stops the loop and its output is printed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
n="${1:-100}"
shift || true
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "repeat_tests: N must be a positive whole number, got '$n'" >&2; exit 2; }
[ $# -gt 0 ] || set -- -L unit
[ -d build/release ] || { echo "repeat_tests: no release build: run scripts/build.sh release first" >&2; exit 2; }
exec ctest --preset release -j "$(nproc)" --repeat "until-fail:$n" "$@"
