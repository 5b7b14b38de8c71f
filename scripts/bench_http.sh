#!/usr/bin/env bash
# Load benchmark of the HTTP server (a benchmark, not a test): starts `dsinfer serve` on the tiny model,
# drives it with `dsinfer bench-http` at 1, 16, 256 and 1000 concurrent streaming connections for a fixed
# time each, and prints requests/s, output tokens/s, TTFT and latency percentiles, errors and the server's
# peak memory. Then a short `wrk` run on /health for the raw HTTP layer.
# Usage: scripts/bench_http.sh [seconds per level (20)] [max_tokens (32)] [extra `dsinfer serve` flags...]
# Env: DSINFER_BIN (default build/release/src/cli/dsinfer), BENCH_LEVELS (default 1,16,256,1000),
#      BENCH_PORT (default 18123), BENCH_MODEL (a model dir; default the embedded tiny model),
#      BENCH_GRACE (seconds requests still open at the end of a level may take, default 600),
#      BENCH_PROMPT (the user message), BENCH_API (chat|completions|messages|responses, default chat).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bin="${DSINFER_BIN:-$here/build/release/src/cli/dsinfer}"
duration="${1:-20}"
max_tokens="${2:-32}"
shift 2 2>/dev/null || shift $# || true
levels="${BENCH_LEVELS:-1,16,256,1000}"
port="${BENCH_PORT:-18123}"
[ -x "$bin" ] || { echo "bench_http.sh: $bin is missing; build first (scripts/build.sh release dsinfer)" >&2; exit 1; }

model_args=()
[ -n "${BENCH_MODEL:-}" ] && model_args=(--model "$BENCH_MODEL" --served-model-name dsinfer-tiny)
log="$(mktemp /tmp/dsinfer-bench-http.XXXXXX.log)"
# The queue limits sit above the highest level, so any error below them is a real failure.
"$bin" serve "${model_args[@]}" --port "$port" --max-concurrent-requests 2048 --max-queue 4096 \
  --shutdown-timeout 5 "$@" >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  grep -q "ready" "$log" && break
  kill -0 "$server" 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.5
done
grep -q "ready" "$log" || { echo "bench_http.sh: server not ready" >&2; cat "$log" >&2; exit 1; }
grep "listening on\|loaded in" "$log"

"$bin" bench-http --url "http://127.0.0.1:$port" --concurrency "$levels" --duration "$duration" \
  --max-tokens "$max_tokens" --grace "${BENCH_GRACE:-600}" --api "${BENCH_API:-chat}" \
  --prompt "${BENCH_PROMPT:-Write a short story about a robot learning to paint.}" \
  --json "${BENCH_JSON:-/tmp/dsinfer-bench-http.json}"
echo "results also in ${BENCH_JSON:-/tmp/dsinfer-bench-http.json}"

if command -v wrk >/dev/null; then
  echo "--- wrk: GET /health (HTTP layer only), 64 connections, 5 s"
  wrk -t 2 -c 64 -d 5s "http://127.0.0.1:$port/health" | sed -n '1,12p'
fi
kill -TERM "$server"
wait "$server" && echo "server stopped cleanly" || echo "server exit code $?"
trap - EXIT
