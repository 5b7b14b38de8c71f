#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what is missing, builds the optimised and the
# sanitizer builds, and runs every test (all tests optimised, the unit tests again under ASan+UBSan).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
scripts/setup.sh
scripts/build.sh release
scripts/tokenizers.sh
ctest --preset release -j "$(nproc)"
scripts/build.sh asan dsinfer_unit_tests
ctest --preset asan -j "$(nproc)"
echo "test.sh: all tests passed"
