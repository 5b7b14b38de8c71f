#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what is missing, builds the optimised and the
# sanitizer builds, and runs every test (all tests optimised, the unit tests again under ASan+UBSan,
# the engine's, the KV store's and the server's threaded tests under ThreadSanitizer).
#
# The repository must stand on its own, so the suite does not run in this checkout: the working tree
# (tracked files and untracked files that are not ignored) is copied into a fresh temporary folder
# with nothing beside it, and setup, build and tests run there. A test, CMake file or script that
# reads a file outside the repository (a sibling folder of the checkout, say) then fails here as it
# would in a new clone.
#
#   scripts/test.sh                the whole suite, in the staged copy
#   scripts/test.sh COMMAND...     COMMAND instead of the suite, in the staged copy, e.g.
#                                  scripts/test.sh bash -c 'scripts/build.sh release test_model && ctest --preset release -R test_model'
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

# Cheap static guard first: no tracked file may name the old outside folders. (The patterns are
# spelled so that this file does not match itself.)
if command -v git >/dev/null 2>&1 && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  if git grep -n -E '\.\./share[d]|DSINFER_SHARE[D]|/work/share[d]' -- .; then
    echo "test.sh: the files above read outside the repository; use configs/, tests/data/ or docs/specs/" >&2
    exit 1
  fi
  mapfile -d '' files < <(git ls-files -z --cached --others --exclude-standard)
else
  echo "test.sh: needs a git checkout (it copies the files git knows about)" >&2
  exit 1
fi

stage_root="$(mktemp -d)"
trap 'rm -rf "$stage_root"' EXIT
stage="$stage_root/dsinfer"
mkdir "$stage"
# Files deleted in the working tree but still in the index are skipped.
present=()
for f in "${files[@]}"; do
  if [ -e "$f" ] || [ -L "$f" ]; then present+=("$f"); fi
done
printf '%s\0' "${present[@]}" | tar -C "$here" --null -T - -cf - | tar -C "$stage" -xf -

# The npm packages that scripts/setup.sh installs live in <repo>/.cache/npm. The copy shares this
# checkout's .cache instead of downloading them again. That is not reading outside the repository:
# .cache is an install cache (like /usr for the Debian packages), made by setup.sh from the pinned
# scripts/npm/package-lock.json, never a source of test inputs; setup.sh still checks it against the
# lock file inside the copy.
mkdir -p "$here/.cache"
ln -s "$(cd "$here/.cache" && pwd -P)" "$stage/.cache"

# ccache keys on absolute paths unless they are under CCACHE_BASEDIR; with it (and the working
# directory left out of the hash) a fresh copy in a new temporary folder hits the cache of the
# previous staged run (measured: 27 of 28 objects of test_model; the miss is tests/test_paths.cpp,
# which holds the source path). The first staged run on a machine compiles everything once.
export CCACHE_BASEDIR="$stage"
export CCACHE_NOHASHDIR=1

cd "$stage"
echo "test.sh: running in the staged copy $stage"
if [ $# -gt 0 ]; then
  "$@"
  exit
fi
# ctest -j starts the tests (after the fixture setups) longest first by the durations it recorded in
# the build folder's Testing/Temporary/CTestCostData.txt. A fresh copy has none, so ctest would start
# them in definition order and a long test defined last (the e2e tests) could run alone at the end
# while the other core idles. tests/ctest_costs/PRESET.txt seeds that file with the seconds of a CI run
# (same format: name, runs, seconds; "---" ends it); a test missing there starts after the listed ones,
# as before. To refresh after a full run: copy build/PRESET/Testing/Temporary/CTestCostData.txt there.
seed_costs() {
  local data="build/$1/Testing/Temporary/CTestCostData.txt"
  if [ ! -e "$data" ] && [ -f "tests/ctest_costs/$1.txt" ]; then
    mkdir -p "$(dirname "$data")"
    cp "tests/ctest_costs/$1.txt" "$data"
  fi
}

scripts/setup.sh
scripts/build.sh release
scripts/tokenizers.sh
seed_costs release
ctest --preset release -j "$(nproc)"
scripts/build.sh asan dsinfer_unit_tests
seed_costs asan
ctest --preset asan -j "$(nproc)"
scripts/build.sh tsan dsinfer_tsan_tests
ctest --preset tsan -j "$(nproc)"
echo "test.sh: all tests passed"
